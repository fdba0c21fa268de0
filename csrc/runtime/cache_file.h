// Files of the disk caches (NEFF cache, the compiler's frontend index, NKI traces): one helper
// for their names, atomic writes and checksummed, self-identifying contents.
//  * Keys are lowercase hex digests; anything else (`../x`, `/abs`) is refused before it can
//    name a file outside the cache directory.
//  * Writes go to a temporary file in the same directory, are fsync'ed and renamed into place,
//    so readers never see a partial entry.
//  * A sealed entry stores its full key and a checksum of everything before the checksum; a
//    reader asks for a key and gets the payload only when the file is whole and was written
//    for that key (an entry copied from another key is foreign, not a hit).
// Thread-safety: stateless; safe from any thread and any number of processes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::rt {

// 8..128 lowercase hex digits.
bool is_cache_key(std::string_view key);
// `dir/key+suffix`; throws rt::Error naming the key when it is not a cache key.
std::string cache_entry_path(const std::string& dir, std::string_view key,
                             std::string_view suffix);

// Writes `data` to `path` atomically. On failure returns false with the reason in `why`
// (nothing is left behind: the temporary file is removed).
bool write_file_atomic(const std::string& path, const void* data, size_t n, std::string* why);

enum class ReadStatus { Ok, Missing, Unusable };
// Reads a whole regular file. Missing: no entry at `path`. Unusable: something is there but
// cannot be an entry (a directory, a device, an I/O error); `why` says what.
ReadStatus read_file(const std::string& path, std::vector<uint8_t>* out, std::string* why);

// Sealed entries: magic "NEMUSEAL", format u32, kind (a short tag naming the cache), key,
// payload, 64-bit checksum of all that.
std::vector<uint8_t> seal(std::string_view kind, std::string_view key, const void* payload,
                          size_t n);
// Ok: `payload` holds the entry's payload. Unusable (with `why`): truncated, damaged, another
// kind of cache file, or written for another key.
ReadStatus unseal(const std::vector<uint8_t>& file, std::string_view kind, std::string_view key,
                  std::vector<uint8_t>* payload, std::string* why);

}  // namespace neuron::rt
