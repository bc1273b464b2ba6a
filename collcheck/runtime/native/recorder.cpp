// collcheck's native recorder: the c10d kernel of record mode and async verify, in C++.
//
// The Python kernel of hook.py costs every collective a round trip through Python (boxing the
// arguments into Python objects, redispatching from Python). This kernel is registered for the
// collectives' c10d operators at the same key (BackendSelect; sends and recvs keep the Python
// kernel, see hook._install_native) and writes the same JSON lines as
// CollectiveEncoder.coll (a group's `group` line before its first `coll` line), but it only enters Python to walk the caller's frames, and calls back
// into Python only for what it has not seen before: a process group, a code object, a chain of
// call sites, a thread. Completion is noted by a C++ callback on the Work's future (no GIL), and
// the `done` line goes out with the next line or at the monitor's next flush.
//
// Built once by collcheck/runtime/native.py with torch.utils.cpp_extension; the Python
// side (tracer.py) reads in-flight collectives back with `snapshot()` for stall reports. In async
// verify (`watch`) it also keeps every `coll` line for the monitor's background thread (`drain`)
// and, before the first collective of each (group, op, call site), calls the monitor's gate on the
// issuing thread, which agrees on it with the other ranks before it is issued.
//
// Binary traces (`--trace-format binary`): given a BinaryTrace at start() (binary_trace.h), the
// kernel writes its lines as binary records through it instead of as JSON lines: a `coll` line as
// a COLL slot (its template before it the first time), a completion folded into its slot.

#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/DynamicTypes.h>

#include <Python.h>
#include <frameobject.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "binary_trace.h"
#include "binary_trace_py.h"

namespace py = pybind11;
using collcheck_binary::BinaryTrace;
using BinaryItem = collcheck_binary::Item;

namespace {

constexpr int kStackDepth = 4;  // user frames per call site, as hook.STACK_DEPTH
constexpr size_t kCacheLimit = 1 << 16;
// Async verify: `coll` lines kept for the monitor between two drains (about 6 MB), and call sites
// (group, op, site) sent to the gate before their first collective is issued, at most.
constexpr size_t kWatchLimit = 1 << 14;
constexpr size_t kGateLimit = 1 << 12;
const char* const kReduceNames[] = {"sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum"};

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void append_double(std::string& out, double value) {
  char buffer[40];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
  // Python's repr always shows a float as one (1.0, not 1): keep the lines identical.
  if (std::string_view(buffer, result.ptr - buffer).find_first_of(".en") == std::string_view::npos) {
    out += ".0";
  }
}

// What the kernel needs to know about one operator (from hook.OpSpec and the schema).
struct OpInfo {
  std::string label_json;  // "\"all_reduce\""
  std::string label;
  int group_at = -1;
  std::vector<int> tensor_at;
  int reduce_at = -1;
  int root_at = -1;
  bool shapes = true;
};

struct GroupInfo {
  std::vector<int64_t> ranks;
  std::string name_json;
  int64_t gid = 0;  // numbered by the Python encoder, which writes the same file
  // Its `group` line, written before the first `coll` line naming gid: shared, not copied per
  // collective (it lists every member, kilobytes for a group of thousands).
  std::shared_ptr<const std::string> definition;
  std::string head;  // {"ev":"coll","rank":R,"group":G,"gid":N,"seq":
};

// Everything touched without the GIL (the issuing thread after the frame walk, the backend's
// thread in the completion callback, the monitor's flush) lives here, behind `mu`. Nothing that
// holds `mu` ever waits for the GIL, so the two locks cannot deadlock.
struct State {
  std::mutex mu;
  int fd = -1;
  int64_t lost = 0;  // lines a failed write dropped since start()
  std::atomic<bool> active{false};  // read without `mu` on every collective
  int64_t session = 0;  // one per start(): a late callback of an earlier tracer is ignored
  std::string deferred;
  std::unordered_map<std::string, int64_t> seq;
  std::unordered_set<int64_t> defined;  // gids whose `group` line this kernel has written
  std::map<std::pair<std::string, int64_t>, std::string> inflight;
  std::unordered_map<std::string, bool> observable;  // group + op -> the backend gives futures
  std::string last_group;
  int64_t last_seq = 0;
  std::string last_line;
  bool last_done = false;
  bool watching = false;  // async verify: every `coll` line is kept for the monitor (`drain`)
  std::vector<std::string> watched;
  int64_t unwatched = 0;  // lines not kept since the last drain: the queue was full
  // A binary trace: every line goes through it as a record (its own lock is taken under `mu`,
  // never the other way round), the deferred completions as items.
  std::shared_ptr<BinaryTrace> binary;
  std::vector<BinaryItem> deferred_items;

  // Binary: the deferred completions and `items`, as records; whether all were written.
  bool write_items_locked(std::vector<BinaryItem> items) {
    if (!deferred_items.empty()) {
      items.insert(items.begin(), std::make_move_iterator(deferred_items.begin()),
                   std::make_move_iterator(deferred_items.end()));
      deferred_items.clear();
    }
    return binary->write(items);
  }

  // A line the kernel wrote whole (`group`, `unobserved`, a failed `done`), as a JSON or binary trace
  // takes it; `fold`: the completion it stands for (kDone, kUnobserved), or 0.
  bool write_line_locked(std::string line, const std::string& group_json = std::string(), int64_t of_seq = 0,
                         uint8_t fold = 0, double t_end = 0.0) {
    if (!binary) return write_locked(std::move(line));
    if (!fold) return write_items_locked({collcheck_binary::line_item(std::move(line))});
    return write_items_locked({collcheck_binary::fold_item(std::move(line), group_json, of_seq, fold, t_end)});
  }

  bool flush_locked() {
    if (binary) return deferred_items.empty() || write_items_locked({});
    return deferred.empty() || write_locked(std::string());
  }

  // Whether all of `line` (after the deferred lines) was written.
  bool write_locked(std::string line) {
    if (!deferred.empty()) {
      line.insert(0, deferred);
      deferred.clear();
    }
    const char* data = line.data();
    size_t left = line.size();
    if (fd < 0) return false;
    while (left > 0) {
      ssize_t written = ::write(fd, data, left);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {  // a full disk: counted (tracer.py says so in the trace), the program goes on
        lost += std::count(data, data + left, '\n');
        return false;
      }
      data += written;
      left -= static_cast<size_t>(written);
    }
    return true;
  }

  void completed_locked(const std::string& group, int64_t seq_done) {
    // A group runs its collectives in order: a later one done means the earlier ones are too.
    auto first = inflight.lower_bound({group, 0});
    auto last = inflight.upper_bound({group, seq_done});
    inflight.erase(first, last);
    if (last_group == group && last_seq == seq_done) last_done = true;
  }

  void done(int64_t of_session, const std::string& group_json, const std::string& group, int64_t seq_done,
            double t_end, bool ok) {
    std::lock_guard<std::mutex> guard(mu);
    if (!active || of_session != session) return;
    completed_locked(group, seq_done);
    std::string line = "{\"ev\":\"done\",\"group\":" + group_json + ",\"seq\":" + std::to_string(seq_done) +
        ",\"t_end\":";
    append_double(line, t_end);
    line += ok ? ",\"ok\":true}\n" : ",\"ok\":false}\n";
    if (ok && binary) {  // folded into its slot with the next write (a LINE if it cannot be)
      deferred_items.push_back(
          collcheck_binary::fold_item(std::move(line), group_json, seq_done, collcheck_binary::kDone, t_end));
    } else if (ok) {
      deferred += line;
    } else {  // a failure is written at once: the process may be about to end
      write_line_locked(std::move(line));
    }
  }
};

std::shared_ptr<State> g_state = std::make_shared<State>();

#include "recorder_python_side.h"

struct Issued {
  std::string group;  // the group name, which numbers its collectives
  std::string group_json;
  std::string observable_key;
  int64_t seq = 0;
  int64_t session = 0;
};

class RecorderKernel final : public c10::OperatorKernel {
 public:
  explicit RecorderKernel(OpInfo info) : info_(std::move(info)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    std::unique_ptr<Issued> issued;
    if (g_state->active) {
      try {
        issued = begin(op, *stack);
      } catch (...) {  // the recorder must never break the program
        issued.reset();
      }
    }
    op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect), stack);
    if (issued) {
      try {
        attach(op, *stack, *issued);
      } catch (...) {
      }
    }
  }

 private:
  std::unique_ptr<Issued> begin(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
    const size_t count = op.schema().arguments().size();
    const size_t base = stack.size() - count;
    auto arg = [&](int at) -> const c10::IValue& { return stack[base + static_cast<size_t>(at)]; };
    std::vector<at::Tensor> tensors;
    for (int at : info_.tensor_at) {
      if (!collect_tensors(arg(at), tensors)) return nullptr;
    }
    auto group = arg(info_.group_at).toCustomClass<c10d::ProcessGroup>();
    const std::string& name = group->getGroupName();
    int reduce = -1;
    if (info_.reduce_at >= 0) reduce = static_cast<int>(arg(info_.reduce_at).toCustomClass<c10d::ReduceOp>()->op_);
    bool has_root = info_.root_at >= 0 && arg(info_.root_at).isInt();
    int64_t root = has_root ? arg(info_.root_at).toInt() : -1;

    std::string head, site, thread, group_json;
    std::shared_ptr<const std::string> definition;
    int64_t gid = 0;
    bool gate_new = false;
    std::vector<std::string> dtypes;
    {
      py::gil_scoped_acquire gil;
      if (g_python == nullptr) return nullptr;
      PythonSide& side = *g_python;
      try {
        const GroupInfo& info = group_of(side, name);
        if (has_root && root >= 0 && root < static_cast<int64_t>(info.ranks.size())) root = info.ranks[root];
        group_json = info.name_json;
        head = info.head;
        gid = info.gid;
        definition = info.definition;
        SiteEntry* entry = nullptr;
        site = site_of_current_frames(side, entry);
        if (side.gate && !side.gate.is_none()) {
          // The key (group, op, site) goes into `gated` once per cached site and (group, op); after
          // that the site's cache entry answers without building the key.
          bool answered = false;
          if (entry != nullptr) {
            for (const auto& known : entry->gated) {
              if (known.first == &info && known.second == info_.label) answered = true;
            }
          }
          if (!answered && side.gated.size() < kGateLimit) {
            gate_new = side.gated.insert(name + '\n' + info_.label + '\n' + site).second;
            if (entry != nullptr) entry->gated.emplace_back(&info, info_.label);
          }
        }
        thread = thread_of(side);
        for (const at::Tensor& tensor : tensors) dtypes.push_back(dtype_json(side, tensor.scalar_type()));
      } catch (py::error_already_set& error) {
        // Ctrl-C landing in one of our Python calls must still reach the program.
        if (error.matches(PyExc_KeyboardInterrupt)) {
          PyErr_SetInterrupt();
        } else {
          error.discard_as_unraisable(__func__);
        }
        return nullptr;
      }
    }

    std::string middle = ",\"op\":" + info_.label_json + ",\"shapes\":[";
    if (info_.shapes) {
      for (size_t i = 0; i < tensors.size(); ++i) {
        if (i) middle += ",";
        middle += "[";
        auto sizes = tensors[i].sizes();
        for (size_t d = 0; d < sizes.size(); ++d) {
          if (d) middle += ",";
          middle += std::to_string(sizes[d]);
        }
        middle += "]";
      }
    }
    middle += "],\"dtypes\":[";
    for (size_t i = 0; i < dtypes.size(); ++i) {
      if (i) middle += ",";
      middle += dtypes[i];
    }
    middle += "],\"reduce_op\":";
    if (reduce >= 0 && reduce < static_cast<int>(sizeof(kReduceNames) / sizeof(kReduceNames[0]))) {
      middle += "\"" + std::string(kReduceNames[reduce]) + "\"";
    } else {
      middle += "null";
    }
    middle += ",\"root\":";
    middle += has_root ? std::to_string(root) : "null";
    middle += ",\"site\":";

    auto result = std::make_unique<Issued>();
    result->group = name;
    result->group_json = group_json;
    result->observable_key = name + '\n' + info_.label;
    State& state = *g_state;
    std::string gated_line;
    {
      std::lock_guard<std::mutex> guard(state.mu);
      if (!state.active) return nullptr;
      int64_t seq = ++state.seq[name];
      result->seq = seq;
      result->session = state.session;
      std::string seq_text = std::to_string(seq);
      double t_start = now_seconds();
      std::string line = head + seq_text + middle + site + thread;
      append_double(line, t_start);
      line += "}\n";
      state.inflight[{name, seq}] = line;
      state.last_group = name;
      state.last_seq = seq;
      state.last_line = line;
      state.last_done = false;
      // A gated line goes to the gate instead, which queues it after the lines before it: a
      // drain on another thread in between must not take it for one already agreed on.
      if (state.watching && !gate_new) {
        if (state.watched.size() < kWatchLimit) {
          state.watched.push_back(line);
        } else {
          state.unwatched += 1;
        }
      }
      if (gate_new) gated_line = line;
      // The group's `group` line goes out in the same write as its first `coll` line, so a rank
      // killed at any point leaves no `coll` line naming a gid its trace does not define; after a
      // failed write it goes out again with the next one (readers accept an unchanged repeat).
      bool known = state.defined.count(gid) > 0;
      bool written = false;
      if (state.binary) {
        std::vector<BinaryItem> items;
        if (!known) items.push_back(collcheck_binary::line_item(*definition));
        // Its template: the line around its seq and t_start (as trace_live.item_of splits it).
        items.push_back(collcheck_binary::coll_item(line, head, middle + site + thread, group_json, seq, t_start));
        written = state.write_items_locked(std::move(items));
      } else {
        if (!known) line.insert(0, *definition);
        written = state.write_locked(std::move(line));
      }
      if (written && !known) state.defined.insert(gid);
    }
    if (gate_new) {  // written, not yet issued: the monitor agrees on it first (without `mu`)
      py::gil_scoped_acquire gil;
      if (g_python != nullptr && g_python->gate && !g_python->gate.is_none()) {
        try {
          g_python->gate(gated_line);
        } catch (py::error_already_set& error) {
          if (error.matches(PyExc_KeyboardInterrupt)) {
            PyErr_SetInterrupt();
          } else {
            error.discard_as_unraisable(__func__);
          }
        }
      }
    }
    return result;
  }

  void attach(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const Issued& issued) {
    const size_t returns = op.schema().returns().size();
    c10::intrusive_ptr<c10d::Work> work;
    for (size_t i = stack.size() - returns; i < stack.size(); ++i) {
      const c10::IValue& value = stack[i];
      if (value.isCustomClass()) {
        work = value.toCustomClass<c10d::Work>();
        break;
      }
    }
    std::shared_ptr<State> state = g_state;
    if (!work) {  // monitored_barrier returns nothing: it has completed when it returns
      state->done(issued.session, issued.group_json, issued.group, issued.seq, now_seconds(), true);
      return;
    }
    bool known_unobservable = false;
    {
      std::lock_guard<std::mutex> guard(state->mu);
      auto found = state->observable.find(issued.observable_key);
      known_unobservable = found != state->observable.end() && !found->second;
    }
    c10::intrusive_ptr<c10::ivalue::Future> future;
    if (!known_unobservable) {
      try {
        future = work->getFuture();
      } catch (...) {  // e.g. gloo's reduce_scatter_tensor: "Work::getFuture not implemented"
      }
    }
    if (!future) {
      std::lock_guard<std::mutex> guard(state->mu);
      state->observable[issued.observable_key] = false;
      if (!state->active || issued.session != state->session) return;
      state->completed_locked(issued.group, issued.seq);  // cannot watch it: never call it a stall
      state->write_line_locked("{\"ev\":\"unobserved\",\"group\":" + issued.group_json + ",\"seq\":" +
                                   std::to_string(issued.seq) + "}\n",
                               issued.group_json, issued.seq, collcheck_binary::kUnobserved);
      return;
    }
    {
      std::lock_guard<std::mutex> guard(state->mu);
      state->observable[issued.observable_key] = true;
    }
    future->addCallback(
        [state, session = issued.session, group = issued.group, group_json = issued.group_json,
         seq = issued.seq](c10::ivalue::Future& done) {
          state->done(session, group_json, group, seq, now_seconds(), !done.hasError());
        },
        /*uses_future=*/false);
  }

  OpInfo info_;
};

// -- the module's functions (called from collcheck/runtime/native.py) --------------------------

void configure(int64_t rank, const std::string& rank_json, py::object group_info, py::object skip_code,
               py::object site_json, py::object thread_piece) {
  if (g_python == nullptr) g_python = new PythonSide();
  PythonSide& side = *g_python;
  side.rank = rank;
  side.rank_json = rank_json;
  side.group_info = std::move(group_info);
  side.skip_code = std::move(skip_code);
  side.site_json = std::move(site_json);
  side.thread_piece = std::move(thread_piece);
  side.gate = py::none();
  side.gated.clear();
  side.groups.clear();
  clear_code_caches(side);
}

// One kernel per collective: (operator, label, process_group at, tensors at, reduce op at, root at,
// whether shapes must agree). Sends and recvs keep the Python kernel (hook._install_native).
void install(const std::vector<std::tuple<std::string, std::string, int, std::vector<int>, int, int, bool>>& ops) {
  g_library = std::make_unique<torch::Library>(torch::Library::IMPL, "c10d", c10::DispatchKey::BackendSelect,
                                               __FILE__, __LINE__);
  for (const auto& [name, label, group_at, tensor_at, reduce_at, root_at, shapes] : ops) {
    OpInfo info;
    info.label = label;
    info.label_json = "\"" + label + "\"";
    info.group_at = group_at;
    info.tensor_at = tensor_at;
    info.reduce_at = reduce_at;
    info.root_at = root_at;
    info.shapes = shapes;
    g_library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RecorderKernel>(std::move(info))));
  }
}

void uninstall() { g_library.reset(); }

// Async verify: keep every `coll` line for `drain`, and call `gate(line)` before the first
// collective of each (group, op, site); None stops both. After configure(), before start().
void watch(py::object gate) {
  if (g_python == nullptr) throw std::runtime_error("collcheck native recorder: not configured");
  g_python->gated.clear();
  for (auto& cached : g_python->sites) cached.second.gated.clear();  // they stand for keys in `gated`
  g_python->gate = gate;
  bool watching = !gate.is_none();
  py::gil_scoped_release release;  // the issuing thread may need the GIL before it releases `mu`
  State& state = *g_state;
  std::lock_guard<std::mutex> guard(state.mu);
  state.watching = watching;
  state.watched.clear();
  state.unwatched = 0;
}

// (the `coll` lines kept since the last drain, in issue order; how many were not kept)
py::tuple drain() {
  std::vector<std::string> lines;
  int64_t unwatched = 0;
  {
    py::gil_scoped_release release;
    State& state = *g_state;
    std::lock_guard<std::mutex> guard(state.mu);
    lines.swap(state.watched);
    unwatched = state.unwatched;
    state.unwatched = 0;
  }
  return py::make_tuple(lines, unwatched);
}

// Start writing to `fd` (the module keeps its own duplicate), or, given a BinaryTrace, through it
// (the tracer's Python side writes through it too); sequence numbers start afresh.
void start(int fd, py::object binary) {
  std::shared_ptr<BinaryTrace> trace;
  if (!binary.is_none()) trace = binary.cast<std::shared_ptr<BinaryTrace>>();
  int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // like Python's own descriptors: not inherited
  if (own < 0) throw std::runtime_error("collcheck native recorder: dup failed");
  State& state = *g_state;
  std::lock_guard<std::mutex> guard(state.mu);
  if (state.fd >= 0) ::close(state.fd);
  state.fd = own;
  state.deferred.clear();
  state.binary = std::move(trace);
  state.deferred_items.clear();
  state.seq.clear();
  state.defined.clear();
  state.inflight.clear();
  state.observable.clear();
  state.last_group.clear();
  state.last_line.clear();
  state.last_seq = 0;
  state.last_done = false;
  state.lost = 0;
  state.session += 1;
  state.active = true;
}

void flush() {
  State& state = *g_state;
  std::lock_guard<std::mutex> guard(state.mu);
  state.flush_locked();
}

void stop() {
  State& state = *g_state;
  std::lock_guard<std::mutex> guard(state.mu);
  state.flush_locked();
  state.active = false;
  state.binary.reset();  // the tracer's Python side writes on through it (its exit record)
  if (state.fd >= 0) ::close(state.fd);
  state.fd = -1;
}

// (issued per group, in-flight lines oldest first, last line, whether it completed)
py::tuple snapshot() {
  std::unordered_map<std::string, int64_t> seq;
  std::vector<std::string> inflight;
  std::string last;
  bool last_done = false;
  {
    py::gil_scoped_release release;  // the issuing thread may need the GIL before it releases `mu`
    State& state = *g_state;
    std::lock_guard<std::mutex> guard(state.mu);
    seq = state.seq;
    for (const auto& entry : state.inflight) inflight.push_back(entry.second);
    last = state.last_line;
    last_done = state.last_done;
  }
  return py::make_tuple(seq, inflight, last, last_done);
}

// How many lines failed writes dropped since start().
int64_t lost() {
  State& state = *g_state;
  std::lock_guard<std::mutex> guard(state.mu);
  return state.lost;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  collcheck_binary::bind(m);
  m.doc() = "collcheck's native recorder (the c10d kernel of record mode and async verify)";
  m.def("configure", &configure);
  m.def("install", &install);
  m.def("uninstall", &uninstall);
  m.def("watch", &watch);
  m.def("drain", &drain);
  m.def("start", &start, py::arg("fd"), py::arg("binary") = py::none());
  m.def("flush", &flush, py::call_guard<py::gil_scoped_release>());
  m.def("stop", &stop, py::call_guard<py::gil_scoped_release>());
  m.def("snapshot", &snapshot);
  m.def("lost", &lost, py::call_guard<py::gil_scoped_release>());
}
