# collie as a torch.distributed backend (src/torch/): COLLIE_WITH_TORCH_BACKEND, on when LibTorch was found, a
# Python 3 interpreter imports torch.distributed (Debian's python3-torch imports only under /usr/bin/python3, so
# that one is asked first), and the Python and pybind11 headers are there. COLLIE_PYTHON3 overrides the interpreter.
set(_torch_backend_default OFF)
set(COLLIE_TORCH_BACKEND_WHY "LibTorch not found")
if(Torch_FOUND)
  find_program(COLLIE_TORCH_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(NOT COLLIE_TORCH_PYTHON3)
    find_program(COLLIE_TORCH_PYTHON3 NAMES python3)
  endif()
  set(COLLIE_TORCH_BACKEND_WHY "no python3 found")
  if(COLLIE_TORCH_PYTHON3)
    execute_process(COMMAND ${COLLIE_TORCH_PYTHON3} -c
      "import sys, sysconfig, torch, torch.distributed as d; assert d.is_available(); print(sysconfig.get_paths()['include'] + ';' + sysconfig.get_config_var('EXT_SUFFIX') + ';' + '%d.%d' % sys.version_info[:2] + ';' + torch.__version__)"
      OUTPUT_VARIABLE _py_info OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _py_rc)
    set(COLLIE_TORCH_BACKEND_WHY "${COLLIE_TORCH_PYTHON3} does not import torch.distributed (apt-get install python3-torch)")
    if(_py_rc EQUAL 0)
      list(GET _py_info 0 COLLIE_PYTHON_INCLUDE_DIR)
      list(GET _py_info 1 COLLIE_PYTHON_EXT_SUFFIX)
      list(GET _py_info 2 COLLIE_PYTHON_VERSION)
      list(GET _py_info 3 COLLIE_PYTHON_TORCH_VERSION)
      find_path(COLLIE_PYBIND11_INCLUDE_DIR pybind11/pybind11.h)
      find_library(COLLIE_TORCH_PYTHON_LIBRARY torch_python PATHS "${TORCH_INSTALL_PREFIX}/lib")
      if(NOT EXISTS "${COLLIE_PYTHON_INCLUDE_DIR}/Python.h")
        set(COLLIE_TORCH_BACKEND_WHY "no Python.h in ${COLLIE_PYTHON_INCLUDE_DIR} (apt-get install python3-dev)")
      elseif(NOT COLLIE_PYBIND11_INCLUDE_DIR)
        set(COLLIE_TORCH_BACKEND_WHY "no pybind11 headers (apt-get install pybind11-dev)")
      elseif(NOT COLLIE_TORCH_PYTHON_LIBRARY)
        set(COLLIE_TORCH_BACKEND_WHY "no libtorch_python next to LibTorch")
      else()
        set(_torch_backend_default ON)
        set(COLLIE_TORCH_BACKEND_WHY "python ${COLLIE_PYTHON_VERSION} (${COLLIE_TORCH_PYTHON3}) with torch ${COLLIE_PYTHON_TORCH_VERSION}; import collie.torch with PYTHONPATH=${CMAKE_BINARY_DIR}/python")
      endif()
    endif()
  endif()
endif()
option(COLLIE_WITH_TORCH_BACKEND "Build collie as a torch.distributed backend (Python package collie.torch)"
  ${_torch_backend_default})
if(COLLIE_WITH_TORCH_BACKEND AND NOT _torch_backend_default)
  message(FATAL_ERROR "COLLIE_WITH_TORCH_BACKEND=ON but: ${COLLIE_TORCH_BACKEND_WHY}")
endif()
# Where `cmake --install` puts the package: the interpreter's dist-packages under the prefix (for /usr/local on
# Debian, /usr/local/lib/python3.X/dist-packages, which that python3 searches).
set(COLLIE_PYTHON_INSTALL_DIR "lib/python${COLLIE_PYTHON_VERSION}/dist-packages" CACHE STRING
  "Install folder of the collie Python package, relative to the prefix")
