// Exit codes of the `sift` commands, carried on the Status a command's action returns: main()
// exits with ExitCodeOf(status). Without an explicit code an error exits 1 (the existing
// behaviour); the job commands mark usage and connection errors 2, and `sift local` marks an
// interruption 128 + signal. Pure functions; thread-safe.
#pragma once

#include "common/status.h"

namespace sift::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the job or the operation failed
inline constexpr int kExitUsage = 2;   // usage error, bad spec, unknown job, unreachable server
// `sift worker --exit-after-jobs`: a job it trained in FAILED or was CANCELLED (distinct from 1,
// the worker's own failure, so a Kubernetes podFailurePolicy can fail the Job on it alone).
inline constexpr int kExitWorkerJobFailed = 3;

// `s` (not OK) with the process exit code `code` attached.
Status WithExitCode(Status s, int code);
// 0 for OK, the attached code, else 1.
int ExitCodeOf(const Status& s);

}  // namespace sift::cli
