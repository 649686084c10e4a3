/* fsmooth's OpenCL host runtime: what the host code that `fsmooth compile --target opencl` writes
 * (<module>.c) needs, and nothing else.  It does in C what fsmooth/opencl_executable.py does
 * through pyopencl (see fsmooth/opencl_artifact.py for the conventions of buffers and launches):
 *
 *   - a context chooses a device (as fsmooth.opencl_device.choose_device: a GPU of a real
 *     platform, else the first CPU device that builds the program, Intel's CPU runtime's before
 *     PoCL's; a simulator such as Oclgrind only when the configuration names its platform),
 *     builds the program once and makes one cl_kernel per launch of every kernel;
 *   - a call (fs_cl_run) gets its sizes from the generated code, already checked as K_check_sizes
 *     checks them; it refuses a buffer larger than the device can allocate (status 4) and a
 *     local size that does not divide the global size or is too large for the device (status 7),
 *     before anything is allocated or launched;
 *   - device buffers (inputs, outputs, hoisted temporaries, the status buffer) are kept per kernel
 *     and reused while they are large enough, so a temporary is allocated once per shape;
 *   - inputs are copied in, the status buffer zeroed, the launches enqueued in order on one
 *     in-order queue (a launch with a zero global dimension is skipped, its buffers not made, and
 *     of a launch and its fallback only the one chosen for the device's local memory runs), the
 *     outputs and the status buffer read back, and the first nonzero status of a launch is the
 *     call's status.
 *
 * Every function returns a status code (FS_STATUS_*, fsmooth_rt.h; FS_STATUS_OPENCL for a failed
 * OpenCL call) and leaves a message in the context's `error`. */
#ifndef FSMOOTH_OPENCL_RT_H
#define FSMOOTH_OPENCL_RT_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fsmooth_rt.h"
#include "fsmooth_cl.h"

/* An OpenCL call failed (no device, a build error, a launch the device refuses). */
#define FS_STATUS_OPENCL 7

/* What a kernel's buffer is (fsmooth.opencl_artifact.Buffer.role) and what a launch argument names. */
enum fs_cl_role { FS_CL_INPUT, FS_CL_OUTPUT, FS_CL_TEMP, FS_CL_LOCAL, FS_CL_STATUS, FS_CL_COUNTER, FS_CL_HANDOVER,
                   FS_CL_LOOKBACK };
enum fs_cl_arg_kind { FS_CL_ARG_BUFFER, FS_CL_ARG_SIZE, FS_CL_ARG_SCALAR };

struct fs_cl_buffer { const char *name; int role; int64_t elem_bytes; };
struct fs_cl_arg { int kind; int index; };  /* index: of a buffer, a size symbol or a scalar parameter */
/* fallback: run instead of the launch before it where that one's local buffers exceed the device's
 * local memory (fs_cl_chosen). */
struct fs_cl_launch { const char *kernel; cl_uint dims; int nargs; const struct fs_cl_arg *args; int fallback; };
/* One kernel of the module: its buffers and its launches, in order. */
struct fs_cl_kernel {
    const char *name;
    int nbuffers;
    const struct fs_cl_buffer *buffers;
    int nlaunches;
    const struct fs_cl_launch *launches;
};

/* A scalar argument: its bytes as the OpenCL kernel takes them. */
struct fs_cl_scalar { size_t bytes; const void *value; };

/* One call: per buffer its element count and host array (an input's or an output's, else NULL),
 * the size symbols' values, the scalar parameters, and per launch 3 global and 3 local sizes
 * (local_sizes NULL for a launch whose local size the implementation chooses: see has_local). */
struct fs_cl_call {
    const int64_t *counts;
    const void **inputs;
    void **outputs;
    const int64_t *sizes;
    const struct fs_cl_scalar *scalars;
    const int64_t *global_sizes;
    const int64_t *local_sizes;
    const int *has_local;
};

struct fs_cl_config { char *platform; char *device; };

/* What a context keeps per kernel: a cl_kernel per launch, a device buffer per buffer (with its
 * capacity in bytes), the zeros that reset the status buffer and the codes read back. */
struct fs_cl_state { cl_kernel *kernels; cl_mem *buffers; int64_t *capacities; cl_int *zeros; cl_int *codes; };

struct fs_cl_context {
    cl_context context;
    cl_device_id device;
    cl_command_queue queue;
    cl_program program;
    cl_ulong max_alloc, local_mem;
    size_t max_group;
    int nkernels;
    const struct fs_cl_kernel *kernels;
    struct fs_cl_state *states;
    const char *(*status_message)(int);
    int setup_status;   /* nonzero: the context could not be set up, and every call fails so */
    char *setup_error;  /* why */
    char *error;        /* the latest failure's message (malloc'd), or NULL */
};

static char *fs_cl_strdup(const char *text) {
    char *copy = malloc(strlen(text) + 1);
    if (copy) strcpy(copy, text);
    return copy;
}

/* Record `status` with a message and return it. */
static int fs_cl_fail(struct fs_cl_context *ctx, int status, const char *format, ...) {
    char message[1024];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    free(ctx->error);
    ctx->error = fs_cl_strdup(message);
    return status;
}

/* The latest failure's message, which the caller frees; NULL if none.  Reading it clears it. */
static char *fs_cl_take_error(struct fs_cl_context *ctx) {
    char *error = ctx->error;
    ctx->error = NULL;
    return error;
}

/* ---- configuration */

static void fs_cl_config_init(struct fs_cl_config *cfg) { cfg->platform = cfg->device = NULL; }

static void fs_cl_config_release(struct fs_cl_config *cfg) {
    free(cfg->platform);
    free(cfg->device);
}

static void fs_cl_config_set(char **field, const char *value) {
    free(*field);
    *field = value ? fs_cl_strdup(value) : NULL;
}

/* ---- the context */

/* Whether `text` contains `part`, ignoring ASCII case. */
static int fs_cl_contains(const char *text, const char *part) {
    size_t n = strlen(text), m = strlen(part);
    for (size_t i = 0; i + m <= n; i++) {
        size_t j = 0;
        while (j < m) {
            char a = text[i + j], b = part[j];
            if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
            if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
            if (a != b) break;
            j++;
        }
        if (j == m) return 1;
    }
    return 0;
}

/* The device fsmooth.opencl_device.choose_device prefers: a GPU, then a CPU device of Intel's CPU
 * runtime, of PoCL, of another platform, then any other device (smaller first). */
static int fs_cl_rank(cl_device_type type, const char *platform) {
    if (type & CL_DEVICE_TYPE_GPU) return 0;
    if (type & CL_DEVICE_TYPE_CPU)
        return fs_cl_contains(platform, "intel(r) opencl") ? 1 : fs_cl_contains(platform, "portable computing language") ? 2 : 3;
    return 4;
}

#define FS_CL_MAX_CANDIDATES 64

/* The devices the configuration allows (a simulator only where its platform is named), best
 * first (fs_cl_rank; in the order the platforms list them where equal). */
static int fs_cl_candidates(struct fs_cl_context *ctx, const struct fs_cl_config *cfg, cl_device_id *candidates,
                            int *ncandidates) {
    int ranks[FS_CL_MAX_CANDIDATES];
    cl_uint nplatforms = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &nplatforms);
    *ncandidates = 0;
    if (err != CL_SUCCESS || nplatforms == 0)
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "no OpenCL platform found (OpenCL error %d)", (int)err);
    cl_platform_id *platforms = malloc(nplatforms * sizeof *platforms);
    if (!platforms) return fs_cl_fail(ctx, FS_STATUS_OUT_OF_MEMORY, "out of memory");
    clGetPlatformIDs(nplatforms, platforms, NULL);
    for (cl_uint p = 0; p < nplatforms; p++) {
        char platform_name[256] = "";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof platform_name - 1, platform_name, NULL);
        if (cfg->platform ? !fs_cl_contains(platform_name, cfg->platform) : fs_cl_contains(platform_name, "oclgrind"))
            continue;
        cl_uint ndevices = 0;
        cl_device_id devices[FS_CL_MAX_CANDIDATES];
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndevices) != CL_SUCCESS || ndevices == 0)
            continue;
        if (ndevices > FS_CL_MAX_CANDIDATES) ndevices = FS_CL_MAX_CANDIDATES;
        clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, ndevices, devices, NULL);
        for (cl_uint d = 0; d < ndevices && *ncandidates < FS_CL_MAX_CANDIDATES; d++) {
            char device_name[256] = "";
            cl_device_type type = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof device_name - 1, device_name, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            if (cfg->device && !fs_cl_contains(device_name, cfg->device)) continue;
            /* insertion after every candidate of the same or a better rank */
            int rank = fs_cl_rank(type, platform_name), at = *ncandidates;
            while (at > 0 && ranks[at - 1] > rank) {
                candidates[at] = candidates[at - 1];
                ranks[at] = ranks[at - 1];
                at--;
            }
            candidates[at] = devices[d];
            ranks[at] = rank;
            (*ncandidates)++;
        }
    }
    free(platforms);
    if (*ncandidates == 0)
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "no OpenCL device found (platform '%s', device '%s')",
                          cfg->platform ? cfg->platform : "any but simulators", cfg->device ? cfg->device : "any");
    return FS_STATUS_OK;
}

/* Whether the device lists `extension` among its CL_DEVICE_EXTENSIONS (space-separated names). */
static int fs_cl_has_extension(cl_device_id device, const char *extension) {
    size_t size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS) return 0;
    char *names = malloc(size + 1);
    if (!names) return 0;
    int found = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, names, NULL) == CL_SUCCESS) {
        names[size] = 0;
        size_t length = strlen(extension);
        for (const char *at = strstr(names, extension); at && !found; at = strstr(at + 1, extension))
            found = (at == names || at[-1] == ' ') && (at[length] == ' ' || at[length] == 0);
    }
    free(names);
    return found;
}

/* `needs_extension`: NULL, or the extension the program needs beside fp64 (the 64-bit atomics of
 * the single-pass scans, dpia/scan_opencl.py). */
static int fs_cl_build(struct fs_cl_context *ctx, const char **source, cl_uint nsource, int needs_fp64,
                       const char *needs_extension) {
    cl_int err;
    cl_device_fp_config fp64 = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL);
    if (needs_fp64 && !fp64)
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "the kernels use double precision, but the OpenCL device has no fp64");
    if (needs_extension && !fs_cl_has_extension(ctx->device, needs_extension))
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "the kernels' single-pass scans need %s, which the OpenCL device lacks; "
                          "compile them with the option single_pass_scan off (the three-phase scan)", needs_extension);
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ctx->max_alloc, &ctx->max_alloc, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ctx->local_mem, &ctx->local_mem, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ctx->max_group, &ctx->max_group, NULL);
    ctx->context = clCreateContext(NULL, 1, &ctx->device, NULL, NULL, &err);
    if (err != CL_SUCCESS) return fs_cl_fail(ctx, FS_STATUS_OPENCL, "clCreateContext failed (OpenCL error %d)", (int)err);
    ctx->queue = clCreateCommandQueue(ctx->context, ctx->device, 0, &err);
    if (err != CL_SUCCESS)
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "clCreateCommandQueue failed (OpenCL error %d)", (int)err);
    ctx->program = clCreateProgramWithSource(ctx->context, nsource, source, NULL, &err);
    if (err != CL_SUCCESS)
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "clCreateProgramWithSource failed (OpenCL error %d)", (int)err);
    err = clBuildProgram(ctx->program, 1, &ctx->device, NULL, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[768] = "";
        clGetProgramBuildInfo(ctx->program, ctx->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "the OpenCL program does not build (OpenCL error %d): %s", (int)err, log);
    }
    return FS_STATUS_OK;
}

/* Undo a failed fs_cl_build, so that another device may be tried. */
static void fs_cl_release_build(struct fs_cl_context *ctx) {
    if (ctx->program) clReleaseProgram(ctx->program);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->context) clReleaseContext(ctx->context);
    ctx->program = NULL;
    ctx->queue = NULL;
    ctx->context = NULL;
}

static int fs_cl_make_kernels(struct fs_cl_context *ctx) {
    ctx->states = calloc((size_t)ctx->nkernels, sizeof *ctx->states);
    if (!ctx->states) return fs_cl_fail(ctx, FS_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < ctx->nkernels; k++) {
        const struct fs_cl_kernel *kernel = &ctx->kernels[k];
        struct fs_cl_state *state = &ctx->states[k];
        /* calloc(0, ...) may be NULL: one element more */
        state->kernels = calloc((size_t)kernel->nlaunches + 1, sizeof *state->kernels);
        state->buffers = calloc((size_t)kernel->nbuffers + 1, sizeof *state->buffers);
        state->capacities = calloc((size_t)kernel->nbuffers + 1, sizeof *state->capacities);
        state->zeros = calloc((size_t)kernel->nlaunches + 1, sizeof *state->zeros);
        state->codes = calloc((size_t)kernel->nlaunches + 1, sizeof *state->codes);
        if (!state->kernels || !state->buffers || !state->capacities || !state->zeros || !state->codes)
            return fs_cl_fail(ctx, FS_STATUS_OUT_OF_MEMORY, "out of memory");
        for (int l = 0; l < kernel->nlaunches; l++) {
            cl_int err;
            state->kernels[l] = clCreateKernel(ctx->program, kernel->launches[l].kernel, &err);
            if (err != CL_SUCCESS)
                return fs_cl_fail(ctx, FS_STATUS_OPENCL, "clCreateKernel(%s) failed (OpenCL error %d)",
                                  kernel->launches[l].kernel, (int)err);
        }
    }
    return FS_STATUS_OK;
}

/* Set up `ctx`: device, program, kernels.  A failure is kept (setup_status, setup_error): every
 * call then returns it, as Futhark's contexts do. */
static void fs_cl_context_init(struct fs_cl_context *ctx, const struct fs_cl_config *cfg, const char **source,
                               cl_uint nsource, int needs_fp64, const char *needs_extension,
                               const struct fs_cl_kernel *kernels, int nkernels,
                               const char *(*status_message)(int)) {
    memset(ctx, 0, sizeof *ctx);
    ctx->kernels = kernels;
    ctx->nkernels = nkernels;
    ctx->status_message = status_message;
    cl_device_id candidates[FS_CL_MAX_CANDIDATES];
    int ncandidates;
    int status = fs_cl_candidates(ctx, cfg, candidates, &ncandidates);
    /* the first candidate that builds the program, as fsmooth.opencl_device takes the first CPU
     * device that builds (PoCL 3.0 builds nothing on CPUs its LLVM does not know); where none
     * does, the best one's failure */
    char *first_failure = NULL;
    for (int c = 0; c < ncandidates; c++) {
        ctx->device = candidates[c];
        status = fs_cl_build(ctx, source, nsource, needs_fp64, needs_extension);
        if (status == FS_STATUS_OK) break;
        if (c == 0) first_failure = fs_cl_take_error(ctx);
        fs_cl_release_build(ctx);
    }
    if (status != FS_STATUS_OK && first_failure) {
        free(ctx->error);
        ctx->error = first_failure;
        first_failure = NULL;
    }
    free(first_failure);
    if (status == FS_STATUS_OK) status = fs_cl_make_kernels(ctx);
    if (status != FS_STATUS_OK) {
        ctx->setup_status = status;
        ctx->setup_error = ctx->error ? fs_cl_strdup(ctx->error) : NULL;
    }
}

static void fs_cl_context_release(struct fs_cl_context *ctx) {
    if (ctx->queue) clFinish(ctx->queue);
    for (int k = 0; ctx->states && k < ctx->nkernels; k++) {
        struct fs_cl_state *state = &ctx->states[k];
        for (int l = 0; state->kernels && l < ctx->kernels[k].nlaunches; l++)
            if (state->kernels[l]) clReleaseKernel(state->kernels[l]);
        for (int b = 0; state->buffers && b < ctx->kernels[k].nbuffers; b++)
            if (state->buffers[b]) clReleaseMemObject(state->buffers[b]);
        free(state->kernels);
        free(state->buffers);
        free(state->capacities);
        free(state->zeros);
        free(state->codes);
    }
    free(ctx->states);
    if (ctx->program) clReleaseProgram(ctx->program);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->context) clReleaseContext(ctx->context);
    free(ctx->setup_error);
    free(ctx->error);
}

static int fs_cl_sync(struct fs_cl_context *ctx) {
    if (ctx->setup_status) return fs_cl_fail(ctx, ctx->setup_status, "%s", ctx->setup_error ? ctx->setup_error : "");
    cl_int err = clFinish(ctx->queue);
    return err == CL_SUCCESS ? FS_STATUS_OK : fs_cl_fail(ctx, FS_STATUS_OPENCL, "clFinish failed (OpenCL error %d)", (int)err);
}

/* ---- a call */

/* The status of a call whose K_check_sizes answered `failed` (fs_size_status), with its message. */
static int fs_cl_size_failure(struct fs_cl_context *ctx, const char *kernel, int failed, int nconstraints,
                              const char *const *constraints) {
    int status = fs_size_status(failed, nconstraints);
    if (failed <= nconstraints)
        return fs_cl_fail(ctx, status, "%s: %s: %s", kernel, ctx->status_message(status), constraints[failed - 1]);
    return fs_cl_fail(ctx, status, "%s: %s (a size of this call)", kernel, ctx->status_message(status));
}

/* The device buffer of buffer `b`, at least `bytes` large (never 0 bytes, which OpenCL forbids). */
static int fs_cl_reuse(struct fs_cl_context *ctx, int k, int b, int64_t bytes) {
    struct fs_cl_state *state = &ctx->states[k];
    if (state->buffers[b] && state->capacities[b] >= bytes) return FS_STATUS_OK;
    cl_int err;
    int64_t capacity = bytes > 0 ? bytes : 1;
    /* the new buffer before the old one goes, as the Python launcher does: Oclgrind may give a
     * buffer made right after a release the released one's place, with its record of which
     * bytes were written */
    cl_mem buffer = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, (size_t)capacity, NULL, &err);
    if (state->buffers[b]) clReleaseMemObject(state->buffers[b]);
    state->buffers[b] = err == CL_SUCCESS ? buffer : NULL;
    state->capacities[b] = err == CL_SUCCESS ? capacity : 0;
    if (err != CL_SUCCESS) {
        return fs_cl_fail(ctx, FS_STATUS_OUT_OF_MEMORY, "%s: buffer '%s' of %lld bytes cannot be allocated (OpenCL error %d)",
                          ctx->kernels[k].name, ctx->kernels[k].buffers[b].name, (long long)bytes, (int)err);
    }
    return FS_STATUS_OK;
}

/* The bytes of buffer `b` in this call: the status buffer has one int per launch; local memory
 * is at least one element. */
static int64_t fs_cl_bytes(const struct fs_cl_kernel *kernel, const struct fs_cl_call *call, int b) {
    const struct fs_cl_buffer *buffer = &kernel->buffers[b];
    if (buffer->role == FS_CL_STATUS) return (int64_t)kernel->nlaunches * (int64_t)sizeof(cl_int);
    int64_t bytes = call->counts[b] * buffer->elem_bytes;  /* K_check_sizes checked that it fits */
    return buffer->role == FS_CL_LOCAL && bytes < buffer->elem_bytes ? buffer->elem_bytes : bytes;
}

/* Whether launch `l` runs in this call: not where a global dimension is zero (no work-item would
 * run; the generated code passes 0 where the launch's condition on the sizes does not hold), and
 * of a launch and its fallback (the next launch, of the same global size), the launch where the
 * local buffers it passes fit the device's local memory in all, else the fallback. */
static int fs_cl_chosen(const struct fs_cl_context *ctx, const struct fs_cl_kernel *kernel,
                        const struct fs_cl_call *call, int l) {
    for (cl_uint d = 0; d < kernel->launches[l].dims; d++)
        if (call->global_sizes[3 * l + d] == 0) return 0;
    if (kernel->launches[l].fallback) return !fs_cl_chosen(ctx, kernel, call, l - 1);
    if (l + 1 == kernel->nlaunches || !kernel->launches[l + 1].fallback) return 1;
    cl_ulong local = 0;  /* each at most local_mem (else the fallback runs), so no sum overflows */
    for (int a = 0; a < kernel->launches[l].nargs; a++) {
        const struct fs_cl_arg *arg = &kernel->launches[l].args[a];
        if (arg->kind != FS_CL_ARG_BUFFER || kernel->buffers[arg->index].role != FS_CL_LOCAL) continue;
        cl_ulong bytes = (cl_ulong)fs_cl_bytes(kernel, call, arg->index);
        if (bytes > ctx->local_mem - local) return 0;
        local += bytes;
    }
    return 1;
}

/* Whether this call needs buffer `b`: a hoisted buffer only where a chosen launch passes it. */
static int fs_cl_passed(const struct fs_cl_context *ctx, const struct fs_cl_kernel *kernel,
                        const struct fs_cl_call *call, int b) {
    if (kernel->buffers[b].role != FS_CL_TEMP && kernel->buffers[b].role != FS_CL_LOCAL) return 1;
    for (int l = 0; l < kernel->nlaunches; l++) {
        if (!fs_cl_chosen(ctx, kernel, call, l)) continue;
        for (int a = 0; a < kernel->launches[l].nargs; a++)
            if (kernel->launches[l].args[a].kind == FS_CL_ARG_BUFFER && kernel->launches[l].args[a].index == b)
                return 1;
    }
    return 0;
}

/* Before anything is allocated or launched: every buffer the call needs within the device's
 * limits, every local size dividing its global size and within the device's work-group size. */
static int fs_cl_plan(struct fs_cl_context *ctx, const struct fs_cl_kernel *kernel, const struct fs_cl_call *call) {
    for (int b = 0; b < kernel->nbuffers; b++) {
        if (!fs_cl_passed(ctx, kernel, call, b)) continue;
        int64_t bytes = fs_cl_bytes(kernel, call, b);
        cl_ulong limit = kernel->buffers[b].role == FS_CL_LOCAL ? ctx->local_mem : ctx->max_alloc;
        if (bytes < 0)
            return fs_cl_fail(ctx, FS_STATUS_OPENCL, "%s: buffer '%s' has a negative size", kernel->name,
                              kernel->buffers[b].name);
        if ((cl_ulong)bytes > limit)
            return fs_cl_fail(ctx, FS_STATUS_OUT_OF_MEMORY,
                              "%s: buffer '%s' would have %lld bytes, more than this device's limit of %llu",
                              kernel->name, kernel->buffers[b].name, (long long)bytes, (unsigned long long)limit);
    }
    for (int l = 0; l < kernel->nlaunches; l++) {
        const int64_t *global = &call->global_sizes[3 * l], *local = &call->local_sizes[3 * l];
        int64_t items = 1;  /* the work-items of a group, while each dim is at most max_group */
        int empty = 0, refused = 0;
        for (cl_uint d = 0; d < kernel->launches[l].dims; d++) {
            if (global[d] < 0 || (call->has_local[l] && local[d] <= 0))
                return fs_cl_fail(ctx, FS_STATUS_OPENCL, "%s: launch of %s has a negative size", kernel->name,
                                  kernel->launches[l].kernel);
            empty |= global[d] == 0;
            if (call->has_local[l]) {
                refused |= global[d] % local[d] != 0 || local[d] > (int64_t)ctx->max_group;
                if (!refused) items *= local[d];
            }
        }
        if (!empty && (refused || items > (int64_t)ctx->max_group))
            return fs_cl_fail(ctx, FS_STATUS_OPENCL, "%s: launch of %s: the local size must divide the global size "
                              "and hold at most %lld work-items on this device", kernel->name,
                              kernel->launches[l].kernel, (long long)ctx->max_group);
    }
    return FS_STATUS_OK;
}

static int fs_cl_enqueue(struct fs_cl_context *ctx, int k, const struct fs_cl_call *call) {
    const struct fs_cl_kernel *kernel = &ctx->kernels[k];
    struct fs_cl_state *state = &ctx->states[k];
    cl_int err = CL_SUCCESS;
    int status;
    for (int b = 0; b < kernel->nbuffers; b++) {
        const struct fs_cl_buffer *buffer = &kernel->buffers[b];
        int64_t bytes = fs_cl_bytes(kernel, call, b);
        if (buffer->role == FS_CL_LOCAL || !fs_cl_passed(ctx, kernel, call, b)) continue;
        cl_mem before = state->buffers[b];
        if ((status = fs_cl_reuse(ctx, k, b, bytes)) != FS_STATUS_OK) return status;
        if ((buffer->role == FS_CL_COUNTER || buffer->role == FS_CL_HANDOVER || buffer->role == FS_CL_LOOKBACK)
            && state->buffers[b] != before) {
            /* zero when made: a one-launch reduction's tickets (left at zero by the launches) and
             * partials (an atomic store reads the old value: opencl_artifact.Buffer), a single-pass
             * scan's words (the kernel keeps them ready for the next call) */
            void *zeros = calloc((size_t)state->capacities[b], 1);
            if (!zeros) return fs_cl_fail(ctx, FS_STATUS_OUT_OF_MEMORY, "out of memory");
            err = clEnqueueWriteBuffer(ctx->queue, state->buffers[b], CL_TRUE, 0, (size_t)state->capacities[b], zeros,
                                       0, NULL, NULL);  /* blocking: the zeros are freed after */
            free(zeros);
        } else if (buffer->role == FS_CL_INPUT && bytes > 0)
            err = clEnqueueWriteBuffer(ctx->queue, state->buffers[b], CL_FALSE, 0, (size_t)bytes, call->inputs[b], 0, NULL, NULL);
        else if (buffer->role == FS_CL_STATUS)
            /* a copy, not clEnqueueFillBuffer, which Oclgrind does not count as initialising */
            err = clEnqueueWriteBuffer(ctx->queue, state->buffers[b], CL_FALSE, 0, (size_t)bytes, state->zeros, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return fs_cl_fail(ctx, FS_STATUS_OPENCL, "%s: copying buffer '%s' to the device failed (OpenCL error %d)",
                              kernel->name, buffer->name, (int)err);
    }
    for (int l = 0; l < kernel->nlaunches; l++) {
        const struct fs_cl_launch *launch = &kernel->launches[l];
        size_t global[3], local[3];
        int empty = 0;
        for (cl_uint d = 0; d < launch->dims; d++) {
            global[d] = (size_t)call->global_sizes[3 * l + d];
            local[d] = (size_t)call->local_sizes[3 * l + d];
            empty |= global[d] == 0;
        }
        if (empty || !fs_cl_chosen(ctx, kernel, call, l)) continue;  /* no work-item would run, or not chosen */
        for (int a = 0; a < launch->nargs && err == CL_SUCCESS; a++) {
            const struct fs_cl_arg *arg = &launch->args[a];
            switch (arg->kind) {
            case FS_CL_ARG_BUFFER:
                if (kernel->buffers[arg->index].role == FS_CL_LOCAL)
                    err = clSetKernelArg(state->kernels[l], (cl_uint)a, (size_t)fs_cl_bytes(kernel, call, arg->index), NULL);
                else
                    err = clSetKernelArg(state->kernels[l], (cl_uint)a, sizeof(cl_mem), &state->buffers[arg->index]);
                break;
            case FS_CL_ARG_SIZE:
                err = clSetKernelArg(state->kernels[l], (cl_uint)a, sizeof(int64_t), &call->sizes[arg->index]);
                break;
            default:
                err = clSetKernelArg(state->kernels[l], (cl_uint)a, call->scalars[arg->index].bytes,
                                     call->scalars[arg->index].value);
            }
        }
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, state->kernels[l], launch->dims, NULL, global,
                                         call->has_local[l] ? local : NULL, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return fs_cl_fail(ctx, FS_STATUS_OPENCL, "%s: launch of %s failed (OpenCL error %d)", kernel->name,
                              launch->kernel, (int)err);
    }
    for (int b = 0; b < kernel->nbuffers; b++) {
        const struct fs_cl_buffer *buffer = &kernel->buffers[b];
        int64_t bytes = fs_cl_bytes(kernel, call, b);
        if (buffer->role == FS_CL_OUTPUT && bytes > 0)
            err = clEnqueueReadBuffer(ctx->queue, state->buffers[b], CL_FALSE, 0, (size_t)bytes, call->outputs[b], 0, NULL, NULL);
        else if (buffer->role == FS_CL_STATUS)
            err = clEnqueueReadBuffer(ctx->queue, state->buffers[b], CL_FALSE, 0, (size_t)bytes, state->codes, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return fs_cl_fail(ctx, FS_STATUS_OPENCL, "%s: copying buffer '%s' from the device failed (OpenCL error %d)",
                              kernel->name, buffer->name, (int)err);
    }
    return FS_STATUS_OK;
}

/* Run kernel `k` of the context on `call`: 0, or the status of the first failure. */
static int fs_cl_run(struct fs_cl_context *ctx, int k, const struct fs_cl_call *call) {
    const struct fs_cl_kernel *kernel = &ctx->kernels[k];
    if (ctx->setup_status)
        return fs_cl_fail(ctx, ctx->setup_status, "%s", ctx->setup_error ? ctx->setup_error : "");
    int status = fs_cl_plan(ctx, kernel, call);
    if (status != FS_STATUS_OK) return status;
    memset(ctx->states[k].codes, 0, (size_t)kernel->nlaunches * sizeof(cl_int));
    status = fs_cl_enqueue(ctx, k, call);
    /* also after a failure: nothing enqueued may still read the caller's arrays once we return */
    cl_int err = clFinish(ctx->queue);
    if (status != FS_STATUS_OK) return status;
    if (err != CL_SUCCESS)
        return fs_cl_fail(ctx, FS_STATUS_OPENCL, "%s: clFinish failed (OpenCL error %d)", kernel->name, (int)err);
    for (int l = 0; l < kernel->nlaunches; l++)
        if (ctx->states[k].codes[l] != 0)
            return fs_cl_fail(ctx, ctx->states[k].codes[l], "%s: %s", kernel->name,
                              ctx->status_message(ctx->states[k].codes[l]));
    return FS_STATUS_OK;
}

#endif /* FSMOOTH_OPENCL_RT_H */
