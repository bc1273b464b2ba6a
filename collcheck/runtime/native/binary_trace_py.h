// binary_trace.h's BinaryTrace as the kernel's module shows it to Python
// (trace_live.BinaryTraceWriter.use_native): made from the writer's descriptor and state, written
// through with the items trace_live.item_of splits its lines into.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "binary_trace.h"

namespace collcheck_binary {

// BinaryTrace.write from the tracer's Python side: (kind, text, before, middle, after, group,
// seq, time, flag) per line.
inline bool write_rows(BinaryTrace& trace, const pybind11::list& rows) {
  std::vector<Item> items;
  items.reserve(rows.size());
  for (const auto& row : rows) {
    pybind11::tuple fields = row.cast<pybind11::tuple>();
    if (fields.size() != 9) throw std::invalid_argument("collcheck binary trace: an item has 9 fields");
    Item item;
    int kind = fields[0].cast<int>();
    if (kind < 0 || kind > 2) throw std::invalid_argument("collcheck binary trace: unknown item kind");
    item.kind = static_cast<Kind>(kind);
    item.text = fields[1].cast<std::string>();
    item.before = fields[2].cast<std::string>();
    item.middle = fields[3].cast<std::string>();
    item.after = fields[4].cast<std::string>();
    item.group_json = fields[5].cast<std::string>();
    item.seq = fields[6].cast<int64_t>();
    item.time = fields[7].cast<double>();
    item.flag = static_cast<uint8_t>(fields[8].cast<int>());
    items.push_back(std::move(item));
  }
  pybind11::gil_scoped_release release;  // the issuing thread may hold the kernel's lock and want the GIL
  return trace.write(items);
}

inline void bind(pybind11::module_& m) {
  using release = pybind11::call_guard<pybind11::gil_scoped_release>;
  pybind11::class_<BinaryTrace, std::shared_ptr<BinaryTrace>>(m, "BinaryTrace")
      .def(pybind11::init<int, int64_t, int64_t, std::string>())
      .def("write", &write_rows)
      .def("lost", &BinaryTrace::lost, release())
      .def("last_error", &BinaryTrace::last_error, release())
      .def("status_offset", &BinaryTrace::status_offset, release())
      .def("close", &BinaryTrace::close, release());
}

}  // namespace collcheck_binary
