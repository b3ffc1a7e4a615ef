// Job credentials (common/job_credential.h): what the coordinator issues verifies, and nothing
// else does — another generation's, another job's, another coordinator's, a tampered or a
// malformed one.
#include "common/job_credential.h"

#include <string>

#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(JobCredentialTest, IssuedCredentialsVerifyAndNameTheirJobAndGeneration) {
  auto issuer = JobCredentialIssuer::Create();
  ASSERT_TRUE(issuer.ok()) << issuer.status();
  const std::string c = issuer->Issue("job-12", 3);
  EXPECT_EQ(c.rfind("job-12/g3/", 0), 0u) << c;
  EXPECT_EQ(c.size(), std::string("job-12/g3/").size() + 64);
  JobCredentialClaim claim;
  ASSERT_TRUE(issuer->Verify(c, &claim));
  EXPECT_EQ(claim.job_id, "job-12");
  EXPECT_EQ(claim.generation, 3);
  EXPECT_EQ(claim.Describe(), "job-12 generation 3");
  EXPECT_EQ(issuer->Issue("job-12", 3), c) << "deterministic under one secret";
}

TEST(JobCredentialTest, OtherGenerationsJobsSecretsAndTamperingDoNotVerify) {
  const JobCredentialIssuer a(std::string(32, 'a'));
  const JobCredentialIssuer b(std::string(32, 'b'));
  const std::string c = a.Issue("job-1", 2);
  EXPECT_NE(a.Issue("job-1", 3), c);
  EXPECT_NE(a.Issue("job-10", 2), c);
  EXPECT_FALSE(b.Verify(c, nullptr)) << "another coordinator's secret";
  // The claim of another generation with this generation's MAC.
  std::string forged = "job-1/g3/" + c.substr(c.rfind('/') + 1);
  EXPECT_FALSE(a.Verify(forged, nullptr));
  forged = "job-10/g2/" + c.substr(c.rfind('/') + 1);
  EXPECT_FALSE(a.Verify(forged, nullptr));
  for (size_t i = c.rfind('/') + 1; i < c.size(); i += 7) {
    std::string flipped = c;
    flipped[i] = flipped[i] == '0' ? '1' : '0';
    EXPECT_FALSE(a.Verify(flipped, nullptr)) << "digit " << i;
  }
  for (const std::string& bad :
       {std::string(), std::string("job-1"), std::string("job-1/g2"), std::string("job-1/g2/xyz"),
        "job-1/gx/" + std::string(64, '0'), "/g2/" + std::string(64, '0'),
        "job-1/g0/" + std::string(64, '0'), "job-1/g2/" + std::string(63, '0'),
        "job-1/g2/" + std::string(64, 'z')}) {
    EXPECT_FALSE(a.Verify(bad, nullptr)) << bad;
    EXPECT_FALSE(ParseJobCredential(bad).ok()) << bad;
  }
  // A message about a malformed credential never quotes it (it may be a secret).
  const std::string secretish = "job-1/g2/" + std::string(64, 'z');
  EXPECT_EQ(std::string(ParseJobCredential(secretish).status().message()).find(secretish),
            std::string::npos);
}

TEST(JobCredentialTest, EqualityIsExact) {
  EXPECT_TRUE(JobCredentialEquals("abc", "abc"));
  EXPECT_FALSE(JobCredentialEquals("abc", "abd"));
  EXPECT_FALSE(JobCredentialEquals("abc", "abcd"));
  EXPECT_FALSE(JobCredentialEquals("", "a"));
  EXPECT_TRUE(JobCredentialEquals("", ""));
}

}  // namespace
}  // namespace sift
