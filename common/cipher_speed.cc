#include "common/cipher_speed.h"

#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/perf_stats.h"

namespace sift {

StatusOr<double> MeasureAesGcmBytesPerSecond(int key_bits, size_t record_bytes, double seconds) {
  if ((key_bits != 128 && key_bits != 256) || record_bytes == 0 || !(seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AES-GCM speed: key of 128 or 256 bits, a "
                     "record of > 0 bytes and seconds > 0 (got ",
                     key_bits, ", ", record_bytes, ", ", seconds, ")"));
  }
  const EVP_CIPHER* cipher = key_bits == 128 ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(),
                                                                      &EVP_CIPHER_CTX_free);
  if (ctx == nullptr) return absl::InternalError("AES-GCM speed: EVP_CIPHER_CTX_new failed");
  std::vector<unsigned char> key(static_cast<size_t>(key_bits / 8), 0x5a);
  std::vector<unsigned char> in(record_bytes), out(record_bytes + 16);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 131 + 7);
  unsigned char iv[12] = {0};
  unsigned char tag[16];
  if (EVP_EncryptInit_ex(ctx.get(), cipher, nullptr, key.data(), nullptr) != 1) {
    return absl::InternalError("AES-GCM speed: EVP_EncryptInit_ex failed");
  }
  // One record: a fresh nonce (as TLS's per-record sequence), the data, the tag.
  auto seal = [&](uint64_t seq) -> bool {
    for (int b = 0; b < 8; ++b) iv[4 + b] = static_cast<unsigned char>(seq >> (8 * b));
    int len = 0, fin = 0;
    return EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, nullptr, iv) == 1 &&
           EVP_EncryptUpdate(ctx.get(), out.data(), &len, in.data(), static_cast<int>(in.size())) ==
               1 &&
           EVP_EncryptFinal_ex(ctx.get(), out.data() + len, &fin) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, sizeof(tag), tag) == 1;
  };
  uint64_t seq = 0;
  for (int w = 0; w < 64; ++w) {  // warm up: key schedule, caches, clocks
    if (!seal(seq++)) return absl::InternalError("AES-GCM speed: encryption failed");
  }
  const double start = SteadyClockSeconds();
  uint64_t records = 0;
  double elapsed = 0;
  do {
    for (int r = 0; r < 64; ++r, ++records) {
      if (!seal(seq++)) return absl::InternalError("AES-GCM speed: encryption failed");
    }
    elapsed = SteadyClockSeconds() - start;
  } while (elapsed < seconds);
  return static_cast<double>(records) * static_cast<double>(record_bytes) / elapsed;
}

}  // namespace sift
