// The Python extension collie._torch_backend (pybind11, on torch's own bindings): ProcessGroupCollie as a
// subclass of torch.distributed's ProcessGroup (torch 1.x) or Backend (torch 2.x), made by
// ProcessGroupCollie(store, rank, size, timeout). collie/torch.py imports it and registers "collie" with
// torch.distributed.Backend.register_backend. Import torch.distributed first: the base class is registered there.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <collie/collie.hpp>

#include "process_group_collie.hpp"

namespace py = pybind11;
using collie::torchbackend::ProcessGroupCollie;

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "collie as a torch.distributed backend (use: import collie.torch; init_process_group('collie'))";
  py::module_::import("torch.distributed");
  py::class_<ProcessGroupCollie, COLLIE_C10D_BASE, c10::intrusive_ptr<ProcessGroupCollie>>(m, "ProcessGroupCollie")
      .def(py::init(
               [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<ProcessGroupCollie>(store, rank, size, timeout);
               }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("collie_name", [](ProcessGroupCollie& pg) { return pg.communicator().name(); })
      .def(
          "last_call",
          [](ProcessGroupCollie& pg) {
            collie::CallInfo info = pg.communicator().lastCall();
            py::dict d;
            d["collective"] = info.collective;
            d["algorithm"] = info.algorithm;
            d["transport"] = info.transport;
            d["bytes"] = info.bytes;
            return d;
          },
          "What collie ran for this group's most recent call (collective, algorithm, transport, bytes)");
  m.attr("collie_version") = collie::versionString();
}
