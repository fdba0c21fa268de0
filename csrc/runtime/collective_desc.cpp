#include "runtime/collective_desc.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/error.h"

namespace neuron::rt {

namespace {

constexpr uint32_t kDescMagic = 0x43534544;  // "DESC"
constexpr size_t kMaxText = 255;
constexpr size_t kMaxDims = 64;
constexpr size_t kMaxPeers = 1 << 16;

template <typename T>
void put(char*& p, const T& v) {
  std::memcpy(p, &v, sizeof(T));
  p += sizeof(T);
}
void put_str(char*& p, const std::string& s) {
  const auto n = static_cast<uint16_t>(std::min(s.size(), kMaxText));
  put(p, n);
  std::memcpy(p, s.data(), n);
  p += n;
}
template <typename T>
void put_vec(char*& p, const std::vector<T>& v) {
  put(p, static_cast<uint32_t>(v.size()));
  if (!v.empty()) std::memcpy(p, v.data(), v.size() * sizeof(T));
  p += v.size() * sizeof(T);
}

struct Reader {
  const char* p;
  const char* end;
  template <typename T>
  T get() {
    NEURON_RT_CHECK(end - p >= static_cast<ptrdiff_t>(sizeof(T)), "collective descriptor is truncated");
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = get<uint16_t>();
    NEURON_RT_CHECK(n <= kMaxText && end - p >= n, "collective descriptor is corrupted");
    std::string s(p, n);
    p += n;
    return s;
  }
  template <typename T>
  std::vector<T> vec(size_t limit) {
    const auto n = get<uint32_t>();
    NEURON_RT_CHECK(n <= limit && static_cast<size_t>(end - p) >= n * sizeof(T), "collective descriptor is corrupted");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), p, n * sizeof(T));
    p += n * sizeof(T);
    return v;
  }
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// The fields of `a` and `b` that differ, e.g. "shape, dtype".
std::string differing(const CollectiveDesc& a, const CollectiveDesc& b) {
  std::vector<std::string> d;
  if (a.op != b.op) d.push_back("operation");
  if (a.seq != b.seq) d.push_back("sequence number");
  if (a.dtype != b.dtype) d.push_back("dtype");
  if (a.shape != b.shape) d.push_back("shape");
  if (a.numel != b.numel && a.shape == b.shape) d.push_back("number of elements");
  if (a.tensors != b.tensors) d.push_back("number of tensors");
  if (a.reduce != b.reduce) d.push_back("reduce op");
  if (a.root != b.root) d.push_back("root");
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + d[i];
  return s;
}

bool same(const CollectiveDesc& a, const CollectiveDesc& b) { return differing(a, b).empty(); }

}  // namespace

std::string CollectiveDesc::text() const {
  std::string s = str(op, " #", seq, " (");
  if (!dtype.empty()) s += dtype;
  if (!shape.empty() || send_bytes.empty()) s += shape_text(shape);
  if (tensors > 1) s += str(" x", tensors, " tensors, ", numel, " elements");
  if (!reduce.empty()) s += ", " + reduce;
  if (root >= 0) s += str(", root ", root);
  return s + ")";
}

size_t CollectiveDesc::encoded_size() const {
  return sizeof(uint32_t) + sizeof(seq) + 3 * sizeof(uint16_t) + std::min(op.size(), kMaxText) +
         std::min(dtype.size(), kMaxText) + std::min(reduce.size(), kMaxText) + sizeof(root) + sizeof(uint32_t) +
         shape.size() * sizeof(int64_t) + sizeof(numel) + sizeof(tensors) + 2 * sizeof(uint32_t) +
         (send_bytes.size() + recv_bytes.size()) * sizeof(uint64_t);
}

size_t CollectiveDesc::max_encoded_size(int world) {
  return 4 + 8 + 6 + 3 * kMaxText + 4 + 4 + kMaxDims * 8 + 8 + 4 + 8 + 16 * static_cast<size_t>(world);
}

void CollectiveDesc::encode(char* out) const {
  NEURON_RT_CHECK(shape.size() <= kMaxDims, "collective descriptor: ", shape.size(), " dimensions (at most ", kMaxDims,
                  ")");
  char* p = out;
  put(p, kDescMagic);
  put(p, seq);
  put_str(p, op);
  put_str(p, dtype);
  put_str(p, reduce);
  put(p, root);
  put_vec(p, shape);
  put(p, numel);
  put(p, tensors);
  put_vec(p, send_bytes);
  put_vec(p, recv_bytes);
}

CollectiveDesc CollectiveDesc::decode(const char* in, size_t n) {
  Reader r{in, in + n};
  NEURON_RT_CHECK(r.get<uint32_t>() == kDescMagic, "collective descriptor is corrupted (bad magic)");
  CollectiveDesc d;
  d.seq = r.get<uint64_t>();
  d.op = r.str();
  d.dtype = r.str();
  d.reduce = r.str();
  d.root = r.get<int32_t>();
  d.shape = r.vec<int64_t>(kMaxDims);
  d.numel = r.get<uint64_t>();
  d.tensors = r.get<uint32_t>();
  d.send_bytes = r.vec<uint64_t>(kMaxPeers);
  d.recv_bytes = r.vec<uint64_t>(kMaxPeers);
  return d;
}

std::string collective_mismatch(const std::vector<CollectiveDesc>& descs, const std::vector<int>& labels,
                                const std::string& group) {
  NEURON_RT_CHECK(descs.size() == labels.size(), "collective_mismatch: ", descs.size(), " descriptors for ",
                  labels.size(), " ranks");
  const std::string where = str("neuron collectives: mismatch in process group '", group, "'");
  // Group the ranks by what they call, in order of first appearance.
  std::vector<std::pair<size_t, std::vector<int>>> kinds;  // (index of a representative, ranks)
  for (size_t i = 0; i < descs.size(); ++i) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return same(descs[k.first], descs[i]); });
    if (it == kinds.end())
      kinds.push_back({i, {labels[i]}});
    else
      it->second.push_back(labels[i]);
  }
  if (kinds.size() > 1) {
    std::string msg = where + ": ";
    for (size_t k = 0; k < kinds.size(); ++k)
      msg += (k ? "; " : "") + ranks_text(kinds[k].second) + (kinds[k].second.size() == 1 ? " calls " : " call ") +
             descs[kinds[k].first].text();
    return msg + " (differs: " + differing(descs[kinds[0].first], descs[kinds[1].first]) + ")";
  }
  // all_to_all: what i sends to j must be what j expects from i.
  for (size_t i = 0; i < descs.size(); ++i) {
    for (size_t j = 0; j < descs.size(); ++j) {
      const auto& s = descs[i].send_bytes;
      const auto& r = descs[j].recv_bytes;
      const auto li = static_cast<size_t>(labels[i]), lj = static_cast<size_t>(labels[j]);
      if (s.empty() && r.empty()) continue;
      NEURON_RT_CHECK(lj < s.size() && li < r.size(), where, ": ", descs[i].op, " split sizes of rank ", labels[i],
                      " or ", labels[j], " do not cover the group");
      if (s[lj] != r[li])
        return str(where, ": in ", descs[i].text(), " rank ", labels[i], " sends ", s[lj], " bytes to rank ", labels[j],
                   ", but rank ", labels[j], " expects ", r[li], " bytes from rank ", labels[i],
                   " (check the input/output split sizes)");
    }
  }
  return {};
}

}  // namespace neuron::rt
