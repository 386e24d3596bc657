# lit configuration of the compiler's .mlir tests: each file's RUN lines
# call flowc-opt and FileCheck. ctest runs them (tests/CMakeLists.txt:
# compiler_lit) with the directories as parameters:
#   lit -v --param flowc_bin_dir=build/bin --param llvm_tools_dir=/usr/lib/llvm-22/bin \
#       --param exec_root=build/tests/compiler tests/compiler
import os

import lit.formats

config.name = "flowc-compiler"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)


def required_param(name):
    value = lit_config.params.get(name)
    if not value:
        lit_config.fatal(f"missing --param {name}=DIR (see tests/compiler/lit.cfg.py)")
    return os.path.abspath(value)


flowc_bin_dir = required_param("flowc_bin_dir")
llvm_tools_dir = required_param("llvm_tools_dir")
# Output/ directories go to the build tree, not beside the sources.
config.test_exec_root = required_param("exec_root")
for tool, directory in (("flowc-opt", flowc_bin_dir), ("FileCheck", llvm_tools_dir),
                        ("not", llvm_tools_dir)):
    if not os.access(os.path.join(directory, tool), os.X_OK):
        lit_config.fatal(f"{tool} not found in {directory}")
# The CUDA toolkit flowc was built with (ptxas, libdevice): tests that lower
# to PTX say `REQUIRES: cuda` and pass `toolkit=%cuda_toolkit`.
cuda_toolkit = lit_config.params.get("cuda_toolkit")
if cuda_toolkit:
    config.available_features.add("cuda")
    config.substitutions.append(("%cuda_toolkit", cuda_toolkit))
config.environment["PATH"] = os.pathsep.join(
    [flowc_bin_dir, llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
