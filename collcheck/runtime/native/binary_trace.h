// collcheck's binary trace records (collcheck/runtime/trace_binary.py), written by the native
// kernel: the C++ twin of trace_live.BinaryTraceWriter's encoder, byte for byte.
//
// One BinaryTrace owns a `.ccbin` file from the moment the tracer hands it over (after its header
// record): the native kernel writes its collectives and completions through it, and the tracer's
// Python side (header, reports, sends and recvs, exit) writes through the same object
// (trace_live.BinaryTraceWriter.use_native), so one writer numbers the templates and knows the
// offset of every COLL slot, whichever thread wrote it. What comes in is an Item: a line already
// split by trace_live.item_of (the Python side) or by the kernel itself (it builds the line from
// its parts); what goes out is what trace_live.BinaryTraceWriter._send writes for the same items,
// in the same order: templates numbered 0, 1, ... as first written, a completion patched into its
// slot (t_end first, then the flags byte), a line that cannot be a record written as a LINE (or
// OVERLONG) record, a failed write counted and the next one padded to a whole slot.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the binary trace format is little-endian");

namespace collcheck_binary {

constexpr size_t kSlot = 32;
constexpr std::string_view kMagic("CCTRACE\x01", 8);
constexpr uint8_t kColl = 1, kText = 2, kCont = 3;
constexpr uint8_t kLine = 0, kTemplate = 1, kOverlong = 2;
constexpr uint8_t kDone = 1, kUnobserved = 2;
constexpr size_t kTextFirst = 24, kContBytes = 31;
constexpr size_t kMaxTemplates = size_t{1} << 16;
constexpr size_t kPendingCompletions = size_t{1} << 16;
constexpr size_t kMaxLineBytes = size_t{1} << 20;
constexpr size_t kFlagsAt = 1, kEndAt = 24;
constexpr int64_t kPage = 4096;

// trace_live.ItemKind
enum class Kind : int { kLine = 0, kColl = 1, kFold = 2 };

struct Item {
  Kind kind = Kind::kLine;
  std::string text;  // the JSON line (no newline): written as a LINE record when it cannot be a record
  std::string before, middle, after;  // kColl: the line around its seq and t_start
  std::string group_json;  // kColl, kFold: the group name as JSON
  int64_t seq = 0;
  double time = 0.0;  // kColl: t_start; kFold with kDone: t_end
  uint8_t flag = 0;  // kFold: kDone or kUnobserved
};

inline std::string without_newline(std::string text) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// A line written as a LINE record.
inline Item line_item(std::string text) {
  Item item;
  item.text = without_newline(std::move(text));
  return item;
}

// The completion (kDone with its t_end, or kUnobserved) of the collective `seq` of a group, folded
// into its slot; `text`, its JSON line, where it cannot be.
inline Item fold_item(std::string text, const std::string& group_json, int64_t seq, uint8_t flag, double t_end) {
  Item item = line_item(std::move(text));
  item.kind = Kind::kFold;
  item.group_json = group_json;
  item.seq = seq;
  item.flag = flag;
  item.time = t_end;
  return item;
}

// A collective's `coll` line `text`: `before` its seq, `middle` between its seq and its t_start.
inline Item coll_item(std::string text, std::string before, std::string middle, const std::string& group_json,
                      int64_t seq, double t_start) {
  Item item = line_item(std::move(text));
  item.kind = Kind::kColl;
  item.before = std::move(before);
  item.middle = std::move(middle);
  item.after = "}";
  item.group_json = group_json;
  item.seq = seq;
  item.time = t_start;
  return item;
}

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// trace_binary.text_slots
inline void text_slots(std::string& out, uint8_t sub, std::string_view payload) {
  size_t start = out.size();
  out.push_back(static_cast<char>(kText));
  out.push_back(static_cast<char>(sub));
  put<uint16_t>(out, 0);
  put<uint32_t>(out, static_cast<uint32_t>(payload.size()));
  out.append(payload.substr(0, kTextFirst));
  out.resize(start + kSlot, '\0');
  for (size_t at = kTextFirst; at < payload.size(); at += kContBytes) {
    size_t slot = out.size();
    out.push_back(static_cast<char>(kCont));
    out.append(payload.substr(at, kContBytes));
    out.resize(slot + kSlot, '\0');
  }
}

// trace_binary.coll_slot, not yet completed (t_end holds t_start)
inline void coll_slot(std::string& out, uint32_t template_id, int64_t seq, double t_start) {
  out.push_back(static_cast<char>(kColl));
  out.push_back(0);
  put<uint16_t>(out, 0);
  put<uint32_t>(out, template_id);
  put<uint64_t>(out, static_cast<uint64_t>(seq));
  put<double>(out, t_start);
  put<double>(out, t_start);
}

class BinaryTrace {
 public:
  // `fd` is duplicated (closed by close()); `offset` bytes are in the file already, its status
  // record at `status_offset` (-1: not written yet, `status_record` goes out with the next write).
  BinaryTrace(int fd, int64_t offset, int64_t status_offset, std::string status_record)
      : offset_(offset), status_offset_(status_offset), status_record_(std::move(status_record)) {
    fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("collcheck binary trace: dup failed");
  }
  ~BinaryTrace() { close(); }
  BinaryTrace(const BinaryTrace&) = delete;
  BinaryTrace& operator=(const BinaryTrace&) = delete;

  // trace_live.BinaryTraceWriter._send: whether all of it was written.
  bool write(const std::vector<Item>& items) {
    std::lock_guard<std::mutex> guard(mu_);
    if (fd_ < 0) return false;
    Batch batch(offset_, templates_.size());
    if (offset_ == 0) {
      batch.add(kMagic, 0);
    } else if ((offset_ - static_cast<int64_t>(kMagic.size())) % static_cast<int64_t>(kSlot)) {
      // a torn write before: pad to a whole slot
      batch.add(std::string(kSlot - (offset_ - kMagic.size()) % kSlot, '\0'), 0);
    }
    for (const Item& item : items) encode(item, batch);
    bool started = status_offset_ >= 0;
    if (!started) {
      batch.status_at = batch.end;
      batch.add(status_record_, 0);
    }
    std::string prefix = tail_patch(batch.patches);
    patch(batch.patches);
    return put_batch(batch, started, prefix);
  }

  int64_t lost() {
    std::lock_guard<std::mutex> guard(mu_);
    return lost_;
  }

  // errno of the latest failed write (-1: a write that wrote nothing), 0 if none failed.
  int last_error() {
    std::lock_guard<std::mutex> guard(mu_);
    return last_error_;
  }

  int64_t status_offset() {
    std::lock_guard<std::mutex> guard(mu_);
    return status_offset_;
  }

  void close() {
    std::lock_guard<std::mutex> guard(mu_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  struct Template {
    uint32_t id;
    std::string group_json;
  };
  struct Slot {
    int64_t offset;
    uint8_t flags;
    uint64_t order;  // when it was (re)written: the oldest is forgotten first
  };
  struct Patch {
    int64_t offset;
    uint8_t flags;
    bool has_end;
    double t_end;
  };
  struct Batch {
    Batch(int64_t offset, size_t first) : end(offset), first_template(first) {}
    int64_t end;
    size_t first_template;
    std::string data;
    std::vector<std::pair<int64_t, int>> records;  // (end offset, lines it stands for)
    std::unordered_map<std::string, Template> templates;
    struct Defined {
      int64_t end;
      std::string key;
      Template known;
    };
    std::vector<Defined> defined;
    std::vector<std::pair<int64_t, std::string>> slots;  // (offset, completion key)
    std::vector<Patch> patches;
    int64_t status_at = -1;
    int64_t last_coll = -1;  // the offset of the COLL slot that ends the batch, if one does
    std::string last_image;  // its bytes

    void add(std::string_view piece, int lines) {
      last_coll = -1;
      data.append(piece);
      end += static_cast<int64_t>(piece.size());
      if (lines) records.emplace_back(end, lines);
    }
    int64_t records_after(int64_t written_to) const {
      int64_t count = 0;
      for (const auto& record : records) {
        if (record.first > written_to) count += record.second;
      }
      return count;
    }
  };

  static std::string slot_key(const std::string& group_json, int64_t seq) {
    std::string key = group_json;
    key.push_back('\0');  // JSON escapes a NUL: the name ends here
    put<int64_t>(key, seq);
    return key;
  }

  void encode(const Item& item, Batch& batch) {
    if (item.kind == Kind::kColl && coll(item, batch)) return;
    if (item.kind == Kind::kFold && fold(item, batch)) return;
    std::string record;
    if (item.text.size() > kMaxLineBytes) {
      text_slots(record, kOverlong, std::string_view());  // read as a JSON reader reads it
    } else {
      text_slots(record, kLine, item.text);
    }
    batch.add(record, 1);
  }

  bool coll(const Item& item, Batch& batch) {
    std::string key;
    key.reserve(item.before.size() + item.middle.size() + item.after.size() + 2);
    key.append(item.before).push_back('\0');
    key.append(item.middle).push_back('\0');
    key.append(item.after);
    const Template* known = nullptr;
    auto found = templates_.find(key);
    if (found != templates_.end()) {
      known = &found->second;
    } else {
      auto pending = batch.templates.find(key);
      if (pending != batch.templates.end()) known = &pending->second;
    }
    if (known == nullptr) {
      size_t ident = batch.first_template + batch.templates.size();
      if (ident >= kMaxTemplates) return false;
      std::string payload;
      put<uint32_t>(payload, static_cast<uint32_t>(ident));
      put<uint32_t>(payload, static_cast<uint32_t>(item.before.size()));
      put<uint32_t>(payload, static_cast<uint32_t>(item.before.size() + item.middle.size()));
      payload.append(item.before).append(item.middle).append(item.after);
      std::string record;
      text_slots(record, kTemplate, payload);
      batch.add(record, 0);
      Template made{static_cast<uint32_t>(ident), item.group_json};
      batch.defined.push_back({batch.end, key, made});
      known = &batch.templates.emplace(std::move(key), std::move(made)).first->second;
    }
    batch.slots.emplace_back(batch.end, slot_key(known->group_json, item.seq));
    std::string slot;
    coll_slot(slot, known->id, item.seq, item.time);
    batch.add(slot, 1);
    batch.last_coll = batch.end - static_cast<int64_t>(kSlot);
    batch.last_image = std::move(slot);
    return true;
  }

  bool fold(const Item& item, Batch& batch) {
    auto found = slots_.find(slot_key(item.group_json, item.seq));
    if (found == slots_.end() || (found->second.flags & item.flag)) return false;
    if (item.flag == kDone && !std::isfinite(item.time)) return false;
    found->second.flags |= item.flag;
    batch.patches.push_back({found->second.offset, found->second.flags, item.flag == kDone, item.time});
    return true;
  }

  // The completions of the file's last record, when it is a COLL slot, taken out of `patches`:
  // its bytes from its flags on, patched, to be written in the same pwrite as the batch (the
  // common case, a collective's completion folded with the next one's record: one system call,
  // as a JSON trace's deferred `done` line costs). Only when those 31 bytes lie in one page: a
  // process killed during a write stops it between pages, so they land all or none; otherwise
  // the slot is patched in two writes as `patch` does. Empty when there is none.
  std::string tail_patch(std::vector<Patch>& patches) {
    if (last_slot_offset_ < 0 || last_slot_offset_ + static_cast<int64_t>(kSlot) != offset_) return {};
    int64_t first = last_slot_offset_ + kFlagsAt, last = last_slot_offset_ + kSlot - 1;
    if (first / kPage != last / kPage) return {};
    std::string image = last_slot_image_;
    size_t merged = 0;
    for (auto next = patches.begin(); next != patches.end();) {
      if (next->offset != last_slot_offset_) {
        ++next;
        continue;
      }
      if (next->has_end) std::memcpy(&image[kEndAt], &next->t_end, sizeof(double));
      image[kFlagsAt] = static_cast<char>(next->flags);
      next = patches.erase(next);
      merged += 1;
    }
    if (!merged) return {};
    tail_patches_ = merged;
    return image.substr(kFlagsAt);
  }

  // t_end first, the flags last: a slot is never marked done before its time is there.
  void patch(const std::vector<Patch>& patches) {
    for (const Patch& next : patches) {
      bool ok = true;
      if (next.has_end) {
        char end[sizeof(double)];
        std::memcpy(end, &next.t_end, sizeof(double));
        ok = ::pwrite(fd_, end, sizeof(end), next.offset + kEndAt) == static_cast<ssize_t>(sizeof(end));
      }
      if (ok) ok = ::pwrite(fd_, &next.flags, 1, next.offset + kFlagsAt) == 1;
      if (!ok) {
        lost_ += 1;
        last_error_ = errno ? errno : -1;
      }
    }
  }

  // The batch appended at `offset_`, after `prefix` (tail_patch) where there is one: positioned
  // writes, this object being the file's only writer once it has it.
  bool put_batch(const Batch& batch, bool started, const std::string& prefix) {
    std::string joined;
    if (!prefix.empty()) joined = prefix + batch.data;
    const std::string& out = prefix.empty() ? batch.data : joined;
    int64_t at = offset_ - static_cast<int64_t>(prefix.size());
    size_t done = 0;
    bool failed = false;
    while (done < out.size()) {
      ssize_t written = ::pwrite(fd_, out.data() + done, out.size() - done, at + static_cast<int64_t>(done));
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {  // a full disk: counted, the program goes on
        failed = true;
        last_error_ = written < 0 ? errno : -1;
        break;
      }
      done += static_cast<size_t>(written);
    }
    if (done < prefix.size()) {  // the completions were not written: nor was the batch
      lost_ += static_cast<int64_t>(tail_patches_);
      done = prefix.size();
    } else if (!prefix.empty()) {
      last_slot_image_.replace(kFlagsAt, prefix.size(), prefix);
    }
    size_t sent = done - prefix.size();
    offset_ += static_cast<int64_t>(sent);
    if (sent > 0) {
      bool ends_with_slot = batch.last_coll >= 0 && batch.last_coll + static_cast<int64_t>(kSlot) == offset_;
      last_slot_offset_ = ends_with_slot ? batch.last_coll : -1;
      if (ends_with_slot) last_slot_image_ = batch.last_image;
    }
    int64_t written_to = offset_;
    for (const auto& defined : batch.defined) {  // templates whose record is whole in the file
      if (defined.end <= written_to) templates_.emplace(defined.key, defined.known);
    }
    for (const auto& slot : batch.slots) {
      if (slot.first + static_cast<int64_t>(kSlot) <= written_to) remember(slot.second, slot.first);
    }
    if (!started && batch.status_at + static_cast<int64_t>(status_record_.size()) <= written_to) {
      status_offset_ = batch.status_at;
    }
    if (failed) lost_ += batch.records_after(written_to);
    return !failed;
  }

  // As the Python writer's dict of the newest kPendingCompletions slots: a key written again
  // becomes the newest, the oldest is forgotten first.
  void remember(const std::string& key, int64_t offset) {
    uint64_t order = next_order_++;
    slots_[key] = Slot{offset, 0, order};
    order_.emplace_back(key, order);
    while (slots_.size() > kPendingCompletions && !order_.empty()) {
      auto oldest = slots_.find(order_.front().first);
      if (oldest != slots_.end() && oldest->second.order == order_.front().second) slots_.erase(oldest);
      order_.pop_front();
    }
    if (order_.size() > 4 * kPendingCompletions) {  // keys rewritten often: drop their stale entries
      std::deque<std::pair<std::string, uint64_t>> live;
      for (auto& entry : order_) {
        auto current = slots_.find(entry.first);
        if (current != slots_.end() && current->second.order == entry.second) live.push_back(std::move(entry));
      }
      order_.swap(live);
    }
  }

  std::mutex mu_;
  int fd_ = -1;
  int64_t offset_;
  int64_t status_offset_;
  std::string status_record_;
  int64_t lost_ = 0;
  int last_error_ = 0;
  // The COLL slot that ends the file (-1: none does) and its bytes, for tail_patch.
  int64_t last_slot_offset_ = -1;
  std::string last_slot_image_;
  size_t tail_patches_ = 0;
  std::unordered_map<std::string, Template> templates_;
  std::unordered_map<std::string, Slot> slots_;
  std::deque<std::pair<std::string, uint64_t>> order_;
  uint64_t next_order_ = 0;
};

}  // namespace collcheck_binary
