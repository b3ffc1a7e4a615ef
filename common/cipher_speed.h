// How fast this process's OpenSSL encrypts with AES-GCM on one core: the floor of what TLS adds
// per byte (each byte is sealed by its sender and opened by its receiver), measured where the
// benchmark that compares TLS with plaintext runs (`sift bench ps --tls both`). Not in a
// SIFT_MINIMAL build (sift_tls, OpenSSL's libcrypto).
#pragma once

#include <cstddef>

#include "common/status.h"

namespace sift {

// Seals records of `record_bytes` (TLS's largest record: 16384) with AES-`key_bits`-GCM (128 or
// 256), tag included, on the calling thread for about `seconds`; returns plaintext bytes per
// second. INVALID_ARGUMENT for another key size, a record of 0 bytes or seconds <= 0; INTERNAL
// when OpenSSL refuses.
StatusOr<double> MeasureAesGcmBytesPerSecond(int key_bits, size_t record_bytes, double seconds);

}  // namespace sift
