// The memory ladder's byte-exact instrument (benchmarks/adbench.py, measure_heap): loaded with
// LD_PRELOAD into a child process, it counts the bytes that malloc and its relatives hand out and
// take back, and the peak of the live bytes since the last reset.  The resident set cannot tell an
// arena of 576 bytes from none (a page is 4 KiB, and freed heap pages stay resident), nor the
// inputs from the temporaries that made them; these counts can.  glibc's __libc_* entry points do
// the allocating, so nothing here calls dlsym (which itself allocates).  Python's small objects
// come from its own mmap'd arenas and are not counted; numpy's data, fsmooth's arena and the C++
// baselines' vectors are.
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);

static int64_t live_bytes, peak_bytes;

static void *counted(void *p) {
    if (p != NULL) {
        int64_t live = __atomic_add_fetch(&live_bytes, (int64_t)malloc_usable_size(p), __ATOMIC_RELAXED);
        int64_t peak = __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED);
        while (live > peak && !__atomic_compare_exchange_n(&peak_bytes, &peak, live, true,
                                                           __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    return p;
}

static void uncounted(void *p) {
    if (p != NULL) __atomic_sub_fetch(&live_bytes, (int64_t)malloc_usable_size(p), __ATOMIC_RELAXED);
}

void *malloc(size_t n) { return counted(__libc_malloc(n)); }
void *calloc(size_t count, size_t n) { return counted(__libc_calloc(count, n)); }
void free(void *p) {
    uncounted(p);
    __libc_free(p);
}
void *realloc(void *p, size_t n) {
    // realloc may move or free the block: count it as a free of the old and a new allocation.
    size_t old = p != NULL ? malloc_usable_size(p) : 0;
    void *q = __libc_realloc(p, n);
    if (q == NULL && n != 0) return NULL;  // the old block is untouched
    __atomic_sub_fetch(&live_bytes, (int64_t)old, __ATOMIC_RELAXED);
    return counted(q);
}
void *memalign(size_t alignment, size_t n) { return counted(__libc_memalign(alignment, n)); }
void *aligned_alloc(size_t alignment, size_t n) { return counted(__libc_memalign(alignment, n)); }
void *valloc(size_t n) { return counted(__libc_memalign((size_t)getpagesize(), n)); }
int posix_memalign(void **out, size_t alignment, size_t n) {
    void *p = __libc_memalign(alignment, n);
    if (p == NULL) return 12;  // ENOMEM
    *out = counted(p);
    return 0;
}

// The instrument's interface (ctypes): live bytes now; the peak since the last reset; a reset.
int64_t heap_counter_live(void) { return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED); }
int64_t heap_counter_peak(void) { return __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED); }
void heap_counter_reset_peak(void) { __atomic_store_n(&peak_bytes, heap_counter_live(), __ATOMIC_RELAXED); }
}
