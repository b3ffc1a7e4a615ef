// The SIFT_MINIMAL build's remote tables (worker/CMakeLists.txt links this file instead of
// remote_tables.cc): there is no embedding-server client in a build without gRPC.
#include "worker/trainer_tables.h"

namespace sift::worker {

Status RemoteTablesSupported() {
  return absl::InvalidArgumentError(
      "this sift is a SIFT_MINIMAL build: it has no embedding-server client (in-process tables "
      "only)");
}

StatusOr<std::unique_ptr<TrainerTables>> ConnectRemoteTables(const RemoteTablesOptions&,
                                                             std::vector<embedding::TableConfig>) {
  return RemoteTablesSupported();
}

}  // namespace sift::worker
