#include "common/data/vocab.h"

namespace sift::data {
namespace {

constexpr char kVocabMagic[] = "SIFTVOCB";
constexpr uint64_t kMaxTables = 64;

void AppendList(const std::vector<std::string>& tokens, std::vector<uint64_t>* offsets,
                std::string* bytes) {
  offsets->assign(1, 0);
  bytes->clear();
  for (const std::string& t : tokens) {
    bytes->append(t);
    offsets->push_back(bytes->size());
  }
}

}  // namespace

Status WriteVocab(const std::string& path, const std::vector<VocabTable>& tables) {
  std::vector<std::string> names;
  std::vector<uint64_t> sizes{tables.size()};
  uint64_t total = 0;
  for (const VocabTable& t : tables) {
    names.push_back(t.name);
    sizes.push_back(t.tokens.size());
    for (const std::string& s : t.tokens) total += s.size();
  }
  BinaryFileWriter w;
  SIFT_RETURN_IF_ERROR(w.Begin(path, kVocabMagic, {tables.size(), total, 0}));
  SIFT_RETURN_IF_ERROR(w.Section(sizes.data(), sizes.size() * sizeof(uint64_t)));
  std::vector<uint64_t> offsets;
  std::string bytes;
  for (size_t k = 0; k <= tables.size(); ++k) {
    AppendList(k == 0 ? names : tables[k - 1].tokens, &offsets, &bytes);
    SIFT_RETURN_IF_ERROR(w.Section(offsets.data(), offsets.size() * sizeof(uint64_t)));
    SIFT_RETURN_IF_ERROR(w.Section(bytes.data(), bytes.size()));
  }
  return w.Finish();
}

StatusOr<std::unique_ptr<Vocab>> Vocab::Open(const std::string& path, bool verify) {
  std::unique_ptr<Vocab> v(new Vocab());
  SIFT_ASSIGN_OR_RETURN(v->file_, BinaryFile::Open(path, kVocabMagic, verify));
  const uint64_t T = v->file_.header().counts[0];
  if (T > kMaxTables) {
    return absl::DataLossError(absl::StrCat(path, ": implausible table count ", T));
  }
  SectionReader r(v->file_);
  SIFT_ASSIGN_OR_RETURN(const uint8_t* s, r.NextArray(T + 1, sizeof(uint64_t)));
  const uint64_t* sizes = reinterpret_cast<const uint64_t*>(s);
  if (sizes[0] != T) {
    return absl::DataLossError(absl::StrCat(path, ": the table list does not match the header"));
  }
  const uint64_t payload = v->file_.header().payload_size;
  for (uint64_t k = 0; k <= T; ++k) {
    if (sizes[k] >= payload / sizeof(uint64_t)) {  // each token needs an 8-byte offset
      return absl::DataLossError(absl::StrCat(path, ": implausible token count ", sizes[k]));
    }
    List l;
    l.size = static_cast<int64_t>(sizes[k]);
    SIFT_ASSIGN_OR_RETURN(const uint8_t* o, r.NextArray(sizes[k] + 1, sizeof(uint64_t)));
    l.offsets = reinterpret_cast<const uint64_t*>(o);
    if (l.offsets[0] != 0) return absl::DataLossError(absl::StrCat(path, ": bad token offsets"));
    for (int64_t i = 0; i < l.size; ++i) {
      if (l.offsets[i + 1] < l.offsets[i]) {
        return absl::DataLossError(absl::StrCat(path, ": token offsets decrease in list ", k));
      }
    }
    SIFT_ASSIGN_OR_RETURN(const uint8_t* b, r.Next(l.offsets[l.size]));
    l.bytes = reinterpret_cast<const char*>(b);
    v->lists_.push_back(l);
  }
  return v;
}

int Vocab::Find(absl::string_view name) const {
  for (int t = 0; t < num_tables(); ++t) {
    if (this->name(t) == name) return t;
  }
  return -1;
}

int64_t Vocab::Lookup(int table, absl::string_view token) const {
  for (int64_t id = 1; id <= size(table); ++id) {
    if (this->token(table, id) == token) return id;
  }
  return 0;
}

}  // namespace sift::data
