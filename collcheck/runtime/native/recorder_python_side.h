// The recorder kernel's Python side (recorder.cpp): the call-site, group, thread and dtype
// caches it reads with the GIL held. Included by recorder.cpp inside its anonymous namespace, after
// the State, OpInfo and GroupInfo it uses, so it has no includes and no namespace of its own.
#pragma once

// A cached call site: its encoded JSON, and the (group, op) pairs whose gate key with this site
// is already in PythonSide::gated, so that the steady state neither builds nor hashes that key.
struct SiteEntry {
  std::string json;
  // (group, op label): the group by its GroupInfo, which lives as long as this entry (configure()
  // clears both); the op by its label, as a kernel re-registered for another op may reuse an address.
  std::vector<std::pair<const void*, std::string>> gated;
};

// Caches below are only touched with the GIL held.
struct PythonSide {
  py::object group_info;  // name -> (ranks, name_json, gid, group line)
  py::object skip_code;  // code -> bool
  py::object site_json;  // () -> str, the encoded site of the current frames
  py::object thread_piece;  // () -> ',"thread":"...","t_start":'
  // Async verify: (line) -> None, called on the issuing thread before a collective from a
  // (group, op, site) not seen yet is issued (the monitor agrees on it with the other ranks).
  py::object gate;
  std::unordered_set<std::string> gated;
  std::string rank_json;
  int64_t rank = 0;
  std::unordered_map<std::string, GroupInfo> groups;
  std::unordered_map<PyObject*, bool> skipped;  // holds a reference to each code object
  std::map<std::vector<std::pair<PyObject*, int>>, SiteEntry> sites;
  std::vector<std::string> dtype_json;  // by ScalarType
};

PythonSide* g_python = nullptr;  // created in configure(), never freed (interpreter lifetime)
std::unique_ptr<torch::Library> g_library;

void clear_code_caches(PythonSide& side) {
  side.sites.clear();
  for (auto& entry : side.skipped) Py_DECREF(entry.first);
  side.skipped.clear();
}

bool is_skipped(PythonSide& side, PyCodeObject* code) {
  PyObject* key = reinterpret_cast<PyObject*>(code);
  auto found = side.skipped.find(key);
  if (found != side.skipped.end()) return found->second;
  bool skip = side.skip_code(py::handle(key)).cast<bool>();
  Py_INCREF(key);
  side.skipped.emplace(key, skip);
  return skip;
}

int frame_lasti(PyFrameObject* frame) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyFrame_GetLasti(frame);
#else
  return frame->f_lasti;
#endif
}

// The encoded call site of the current Python frames, cached per chain of (code, instruction) of
// the user frames, as hook._site_from does; `entry` is set to its cache entry (null when the site
// is not cached). With the GIL held.
std::string site_of_current_frames(PythonSide& side, SiteEntry*& entry) {
  entry = nullptr;
  // Bounded caches are cleared between walks, never during one: a chain being built refers to
  // code objects that only `skipped` keeps alive once the frames are gone.
  if (side.skipped.size() >= kCacheLimit || side.sites.size() >= kCacheLimit) clear_code_caches(side);
  PyFrameObject* frame = PyEval_GetFrame();
  if (frame == nullptr) {  // a thread without Python frames: the Python side asks the main thread
    return side.site_json().cast<std::string>();
  }
  Py_INCREF(frame);
  std::vector<std::pair<PyObject*, int>> chain;
  while (frame != nullptr && chain.size() < static_cast<size_t>(kStackDepth)) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    bool skip = true;
    try {
      skip = is_skipped(side, code);
    } catch (...) {
      Py_DECREF(code);
      Py_DECREF(frame);
      throw;
    }
    if (!skip) chain.emplace_back(reinterpret_cast<PyObject*>(code), frame_lasti(frame));
    Py_DECREF(code);  // kept alive by `skipped`
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (chain.empty()) return side.site_json().cast<std::string>();
  auto found = side.sites.find(chain);
  if (found != side.sites.end()) {
    entry = &found->second;
    return found->second.json;
  }
  std::string site = side.site_json().cast<std::string>();
  entry = &side.sites.emplace(std::move(chain), SiteEntry{site, {}}).first->second;
  return site;
}

const GroupInfo& group_of(PythonSide& side, const std::string& name) {
  auto found = side.groups.find(name);
  if (found != side.groups.end()) return found->second;
  py::tuple info = side.group_info(name);
  GroupInfo group;
  for (auto rank : info[0].cast<py::list>()) group.ranks.push_back(rank.cast<int64_t>());
  group.name_json = info[1].cast<std::string>();
  group.gid = info[2].cast<int64_t>();
  group.definition = std::make_shared<const std::string>(info[3].cast<std::string>());
  group.head = "{\"ev\":\"coll\",\"rank\":" + side.rank_json + ",\"group\":" + group.name_json +
      ",\"gid\":" + std::to_string(group.gid) + ",\"seq\":";
  return side.groups.emplace(name, std::move(group)).first->second;
}

// The thread's name, kept in its thread state's dict: thread idents are reused by new threads,
// thread states are not, so a new thread is always asked for (as hook.py reads it per event).
std::string thread_of(PythonSide& side) {
  // Interned once: PyDict_GetItemString would make and hash a new str on every collective.
  static PyObject* const kKey = PyUnicode_InternFromString("collcheck.thread_piece");  // never freed
  PyObject* dict = PyThreadState_GetDict();  // borrowed
  if (dict != nullptr && kKey != nullptr) {
    PyObject* known = PyDict_GetItemWithError(dict, kKey);  // borrowed
    if (known != nullptr && PyUnicode_Check(known)) return py::reinterpret_borrow<py::str>(known).cast<std::string>();
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  py::str piece = side.thread_piece();
  if (dict != nullptr && kKey != nullptr) PyDict_SetItem(dict, kKey, piece.ptr());
  return piece.cast<std::string>();
}

// Tensor, Tensor[] and Tensor[][] arguments, flattened. False if a tensor is fake (tracing or
// compiling: meta tensors, Python-dispatched subclasses such as FakeTensor), which is no collective.
bool collect_tensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined()) return true;
    if (tensor.is_meta() || tensor.key_set().has(c10::DispatchKey::Python)) return false;
    out.push_back(tensor);
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) {
      if (!collect_tensors(c10::IValue(tensor), out)) return false;
    }
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      if (!collect_tensors(item, out)) return false;
    }
  }
  return true;
}

// torch's own name of a dtype ("float32"), asked of Python once per dtype. With the GIL held.
const std::string& dtype_json(PythonSide& side, c10::ScalarType type) {
  auto index = static_cast<size_t>(type);
  if (index >= side.dtype_json.size()) side.dtype_json.resize(index + 1);
  std::string& known = side.dtype_json[index];
  if (known.empty()) {
    std::string name = py::str(py::handle(reinterpret_cast<PyObject*>(torch::getTHPDtype(type))));
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
    known = "\"" + name + "\"";
  }
  return known;
}
