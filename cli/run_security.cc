#include "cli/run_security.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/tls_certs.h"

namespace sift::cli {

StatusOr<RunSecurity> MakeRunSecurity(const std::string& dir, int servers, int workers) {
  const absl::Time now = absl::Now();
  auto spec = [now](const std::string& cn) {
    CertificateSpec c;
    c.common_name = cn;
    c.dns_names = {"localhost"};
    c.ip_addresses = {"127.0.0.1"};
    c.not_before = now - absl::Minutes(5);
    c.not_after = now + absl::Hours(24 * 30);
    return c;
  };
  SIFT_ASSIGN_OR_RETURN(PemPair ca, MakeCertificateAuthority(spec("sift run CA")));
  SIFT_RETURN_IF_ERROR(WriteCertificateAuthorityDir(JoinPath(dir, "ca"), ca));
  std::vector<std::string> members = {"coordinator"};
  for (int i = 0; i < servers; ++i) members.push_back(absl::StrCat("server-", i));
  for (int i = 0; i < workers; ++i) members.push_back(absl::StrCat("worker-", i));
  for (const std::string& m : members) {
    SIFT_ASSIGN_OR_RETURN(PemPair cert, IssueCertificate(ca, spec(m)));
    SIFT_RETURN_IF_ERROR(WriteMemberDir(JoinPath(dir, m), ca.cert, cert));
  }
  SIFT_RETURN_IF_ERROR(MakeDirs(JoinPath(dir, "client")));
  SIFT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "client/ca.crt"), ca.cert));
  std::random_device random;
  std::string token;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&token, absl::Hex(random(), absl::kZeroPad8));
  RunSecurity s;
  s.dir = dir;
  s.tokens_file = JoinPath(dir, "tokens.csv");
  s.client.tls_dir = JoinPath(dir, "client");
  s.client.token_file = JoinPath(dir, "client/token");
  for (const auto& [path, text] :
       {std::pair<std::string, std::string>{s.tokens_file, absl::StrCat(token, ",local,admin\n")},
        {s.client.token_file, token + "\n"}}) {
    SIFT_RETURN_IF_ERROR(WriteFileAtomic(path, text));
    if (::chmod(path.c_str(), 0600) != 0) {
      return absl::InternalError(absl::StrCat("chmod 600 ", path, ": ", std::strerror(errno)));
    }
  }
  return s;
}

}  // namespace sift::cli
