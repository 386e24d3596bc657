/* The runtime's C API: open a `.fca` artifact, list its inputs and outputs,
 * and run it on caller memory. Plain C with opaque handles so that any
 * language binds it without a C++ toolchain (the Python client binds it with
 * ctypes: python/flowc/_runtime.py). Built as libflowc_runtime_c.so
 * (build/lib/); docs/python.md describes it.
 *
 * Errors: every function that can fail returns a flowc_status (FLOWC_OK is
 * 0) and, on failure, sets a message naming what is wrong (the argument,
 * the input, the file, the section) that flowc_last_error() returns. The
 * message is per thread and lasts until the next failing call on that
 * thread. No function aborts or throws on bad input or bad arguments,
 * NULL pointers included.
 *
 * Lifetimes: a session keeps its artifact mapped, so flowc_artifact_close
 * may come before flowc_session_close. Strings and shapes that
 * flowc_artifact_input/output/metadata return live as long as the artifact
 * handle they came from. Handles are thread-safe: runs on one session are
 * serialized (one at a time); use one session per thread to run in
 * parallel.
 *
 * Warnings (a plan candidate this machine cannot run, say) go to stderr as
 * "flowc: warning: ...", never to stdout, unless the host set a default
 * spdlog logger of its own before flowc_artifact_open: that one is kept. */
#ifndef FLOWC_RUNTIME_C_API_H
#define FLOWC_RUNTIME_C_API_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FLOWC_C_API __attribute__((visibility("default")))
#else
#define FLOWC_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The version of this API; grows when a function is added or changes. */
#define FLOWC_C_API_VERSION 2

/** Status codes: the values of flowc::StatusCode (flowc/support/Status.h). */
typedef enum flowc_status {
  FLOWC_OK = 0,
  FLOWC_INVALID_ARGUMENT = 1,
  FLOWC_NOT_FOUND = 2,
  FLOWC_ALREADY_EXISTS = 3,
  FLOWC_DATA_LOSS = 4,
  FLOWC_UNAVAILABLE = 5,
  FLOWC_RESOURCE_EXHAUSTED = 6,
  FLOWC_FAILED_PRECONDITION = 7,
  FLOWC_UNIMPLEMENTED = 8,
  FLOWC_INTERNAL = 9,
  FLOWC_CANCELLED = 10,
  FLOWC_UNAUTHENTICATED = 11,
  FLOWC_PERMISSION_DENIED = 12,
} flowc_status;

/** How flowc_artifact_open checks the file (flowc::runtime::Verification). */
typedef enum flowc_verification {
  /** Every section and external weight against its SHA-256. */
  FLOWC_VERIFY_DIGESTS = 0,
  /** Bounds only: for benchmarks of open; damage inside a section's bounds
   * goes unnoticed. */
  FLOWC_VERIFY_BOUNDS_ONLY = 1,
} flowc_verification;

typedef struct flowc_artifact flowc_artifact;
typedef struct flowc_session flowc_session;

/** One input or output of an artifact's plan. */
typedef struct flowc_tensor_info {
  const char *name;
  /** "float32", "int64", "int32", "bool", "float16", ... */
  const char *dtype;
  size_t rank;
  const int64_t *shape;
  /** Bytes of a dense row-major tensor of this spec. */
  uint64_t byte_size;
} flowc_tensor_info;

/** A tensor in caller memory: dense, row-major, little-endian; bool is one
 * byte. `data` must be aligned to the dtype's element size. */
typedef struct flowc_tensor {
  /** The plan's name; for outputs NULL means "the i-th output". */
  const char *name;
  const char *dtype;
  size_t rank;
  const int64_t *shape;
  void *data;
  /** Bytes at `data`: exactly the tensor's size. */
  uint64_t byte_size;
} flowc_tensor;

/** FLOWC_C_API_VERSION of the library actually loaded. */
FLOWC_C_API int flowc_c_api_version(void);

/** The message of this thread's last failure ("" if none). */
FLOWC_C_API const char *flowc_last_error(void);

/** "InvalidArgument", ... for a status code; "Unknown" otherwise. */
FLOWC_C_API const char *flowc_status_name(int status);

/** Maps and validates the artifact at `path`. A thin artifact's weights are
 * mapped from the cache at `cache_dir`, else from the cache that linked it
 * (recorded in its metadata); with `cache_dir` NULL they stay unresolved
 * (listing works, sessions refuse). Codes: FLOWC_INVALID_ARGUMENT for NULL
 * arguments or a file that is no artifact, FLOWC_NOT_FOUND for a missing
 * file or weight (naming its digest), FLOWC_FAILED_PRECONDITION for another
 * format version, FLOWC_DATA_LOSS naming the section for a damaged or
 * truncated file. */
FLOWC_C_API flowc_status flowc_artifact_open(const char *path, const char *cache_dir,
                                             flowc_verification verification,
                                             flowc_artifact **out);

/** Releases the handle (NULL is a no-op). Sessions made from it stay valid. */
FLOWC_C_API void flowc_artifact_close(flowc_artifact *artifact);

FLOWC_C_API flowc_status flowc_artifact_input_count(const flowc_artifact *artifact,
                                                    size_t *out);
FLOWC_C_API flowc_status flowc_artifact_output_count(const flowc_artifact *artifact,
                                                     size_t *out);
/** The i-th input / output spec; FLOWC_INVALID_ARGUMENT for an index out of
 * range. */
FLOWC_C_API flowc_status flowc_artifact_input(const flowc_artifact *artifact,
                                              size_t index, flowc_tensor_info *out);
FLOWC_C_API flowc_status flowc_artifact_output(const flowc_artifact *artifact,
                                               size_t index, flowc_tensor_info *out);
/** The artifact's metadata section as JSON (model digest, compiler build,
 * options, op counts). */
FLOWC_C_API flowc_status flowc_artifact_metadata(const flowc_artifact *artifact,
                                                 const char **out);

/** Loads the artifact's code for running. `threads`: threads the library
 * kernels use (0: all cores). Codes: FLOWC_INVALID_ARGUMENT (NULL, negative
 * threads), FLOWC_FAILED_PRECONDITION for a thin artifact whose weights are
 * not at hand, FLOWC_UNAVAILABLE for code this host or runtime cannot load. */
FLOWC_C_API flowc_status flowc_session_create(flowc_artifact *artifact, int threads,
                                              flowc_session **out);

/** flowc_session_create for CUDA code on the driver's device `gpu_device`
 * (flowc_session_create's is device 0); CPU code ignores it. Also
 * FLOWC_INVALID_ARGUMENT for a negative device, FLOWC_NOT_FOUND (naming the
 * devices there are) for one the driver does not see, FLOWC_UNAVAILABLE
 * without a GPU, FLOWC_FAILED_PRECONDITION for a GPU of another compute
 * capability than the code's. Since version 2. */
FLOWC_C_API flowc_status flowc_session_create_on_gpu(flowc_artifact *artifact,
                                                     int threads, int gpu_device,
                                                     flowc_session **out);

/** Releases the session (NULL is a no-op); not while a run is in progress. */
FLOWC_C_API void flowc_session_close(flowc_session *session);

/** Runs the graph once. `inputs`: every plan input exactly once, by name,
 * in any order. `outputs`: the plan's outputs in plan order; the code writes
 * each result straight into `outputs[i].data` (no copy, no allocation held
 * past the call). Every tensor's dtype, shape and byte_size must match the
 * plan, and no output may overlap an input or another output (the code
 * writes each result as soon as it is computed): FLOWC_INVALID_ARGUMENT
 * naming the tensor otherwise (and nothing is run). Other codes: a library
 * kernel's failure (FLOWC_INTERNAL, FLOWC_RESOURCE_EXHAUSTED). */
FLOWC_C_API flowc_status flowc_session_run(flowc_session *session,
                                           const flowc_tensor *inputs, size_t input_count,
                                           const flowc_tensor *outputs,
                                           size_t output_count);

#ifdef __cplusplus
}
#endif

#endif /* FLOWC_RUNTIME_C_API_H */
