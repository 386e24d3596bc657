// The fat binary of Helpers.cu, which nvcc builds (runtime/CMakeLists.txt),
// as the read-only symbol flowc_gpu_helpers (LibraryKernels.cpp loads it
// with cuModuleLoadData). The trailing zero ends it for the driver, which
// reads the image's size from its header.
  .section .rodata
  .balign 64
  .globl flowc_gpu_helpers
  .type flowc_gpu_helpers, @object
flowc_gpu_helpers:
  .incbin FLOWC_GPU_HELPERS_FATBIN
  .byte 0
  .size flowc_gpu_helpers, . - flowc_gpu_helpers
  .section .note.GNU-stack, "", @progbits
