#include "common/job_credential.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sift {
namespace {

constexpr size_t kMacHexDigits = 64;
constexpr size_t kMaxJobIdBytes = 256;

std::string Subject(absl::string_view job_id, int64_t generation) {
  return absl::StrCat(job_id, "/g", generation);
}

}  // namespace

std::string JobCredentialClaim::Describe() const {
  return absl::StrCat(job_id, " generation ", generation);
}

StatusOr<JobCredentialClaim> ParseJobCredential(absl::string_view credential) {
  const auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job credential that is not \"<job>/g<generation>/<64 hex>\" (", why, ")"));
  };
  const size_t last = credential.rfind('/');
  if (last == absl::string_view::npos) return bad("no '/'");
  const absl::string_view mac = credential.substr(last + 1);
  if (mac.size() != kMacHexDigits) return bad("the MAC is not 64 hex digits");
  for (char c : mac) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return bad("the MAC is not hex");
  }
  const absl::string_view subject = credential.substr(0, last);
  const size_t g = subject.rfind("/g");
  if (g == absl::string_view::npos || g == 0 || g > kMaxJobIdBytes) return bad("no job");
  JobCredentialClaim claim;
  claim.job_id = std::string(subject.substr(0, g));
  if (!absl::SimpleAtoi(subject.substr(g + 2), &claim.generation) || claim.generation < 1) {
    return bad("no generation");
  }
  return claim;
}

bool JobCredentialEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

StatusOr<JobCredentialIssuer> JobCredentialIssuer::Create() {
  std::string secret(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()),
                 static_cast<int>(secret.size())) != 1) {
    return absl::InternalError("job credentials: OpenSSL's RAND_bytes failed");
  }
  return JobCredentialIssuer(std::move(secret));
}

std::string JobCredentialIssuer::Issue(absl::string_view job_id, int64_t generation) const {
  const std::string subject = Subject(job_id, generation);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(subject.data()), subject.size(), mac, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = absl::StrCat(subject, "/");
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

bool JobCredentialIssuer::Verify(absl::string_view credential, JobCredentialClaim* claim) const {
  StatusOr<JobCredentialClaim> parsed = ParseJobCredential(credential);
  if (!parsed.ok()) return false;
  const bool ok = JobCredentialEquals(credential, Issue(parsed->job_id, parsed->generation));
  if (claim != nullptr) *claim = std::move(parsed).value();
  return ok;
}

}  // namespace sift
