/* The native tile runtime (ASPEN's scheduling engines): no barriers, one engine per worker thread.
 *
 * A tile graph arrives as CSR arrays (parents and children of every tile) and a depth column per tile.
 * Each inference: every tile's count of unfinished parents is reset, the roots are dealt out to the
 * workers' rows, and every worker runs ASPEN's Algorithm 1:
 *   take the child kept from the last tile, else pop from my row (deepest column first), else steal
 *   from another row; run the tile's kernel; decrement each child's counter atomically; the first
 *   child that becomes ready is kept for myself, the others are pushed into my row.
 * The ready pool is a row of queues per worker, one intrusive LIFO per depth column, with a bit mask
 * of non-empty columns; stealing scans the other rows in order. Idle workers spin a while, then park
 * on a condition variable; a push wakes them only when someone is parked (no lost wake-ups: the
 * parker announces itself under the lock before it re-checks the ready count, the pusher counts the
 * ready tile before it looks for parkers, both sequentially consistent).
 * The calling thread is worker 0 and runs the engine too; pw_run returns as soon as every tile has run
 * (a worker still inside the engine then touches no tile data; it leaves, or takes part in the next
 * inference; pw_set_graph and pw_destroy wait for it). Python calls pw_run through ctypes, which
 * releases the GIL.
 *
 * Kernels are dispatched by op code. Op PW_OP_TEST is a checking kernel: out[t] = bias[t] +
 * 0.5 * sum(out[parents]) after `spin[t]` rounds of arithmetic, so a tile run before one of its
 * parents gives a wrong value. Op PW_OP_LAYER runs the tile's layer kernel (tile_kernels.c) on the
 * tile's box of the layer output, with the worker's own scratch memory (allocated by that worker at
 * its first tile, so it sits near the core that uses it).
 */
#define _GNU_SOURCE /* clock_gettime, sched_getcpu, thread affinity */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tile_kernels.h"

#define PW_MAX_COLS 64
#define PW_SPIN_ROUNDS 4000
/* after an inference a worker keeps watching for the next one this long (by default; pw_set_linger)
 * before it parks. On this VM a thread parked for a few tens of ms woke too late to take part in the
 * next run, and in the one after (SqueezeNet, 2 workers, each call after 50 ms idle: 7.9 ms with 3 ms
 * of linger, 4.3 with 100, 4.0-4.3 back to back; ONNX Runtime's spinning threads 3.9 either way).
 * Intel's OpenMP keeps its threads spinning 200 ms (KMP_BLOCKTIME) for the same reason. */
#define PW_LINGER_NS 200000000
#define PW_MAX_WORKERS 256
#define PW_OP_TEST 0
#define PW_OP_LAYER 1

typedef struct {
    pthread_mutex_t lock;
    int32_t head[PW_MAX_COLS];
    uint64_t mask; /* bit c set: column c is not empty */
} pw_row;

typedef struct pw_runtime pw_runtime;

typedef struct {
    pw_runtime *rt;
    int id;
    pthread_t thread;
} pw_worker;

struct pw_runtime {
    int32_t n_tiles, capacity; /* capacity: tiles the per-tile arrays below have room for */
    const int32_t *p_ptr, *p_idx, *c_ptr, *c_idx, *op;
    int32_t *col, *next, *roots;
    int32_t n_roots;
    atomic_int *pending;
    /* PW_OP_TEST data */
    float *test_out;
    const float *test_bias;
    const int32_t *test_spin;
    int32_t *ran_on; /* worker that ran each tile, for tests and reports */
    /* placement (pw_set_homes): each tile's home worker (modulo the workers), -1 for none, or NULL; with
     * no_steal, a worker runs only what is in its own row (static lanes) */
    const int32_t *home;
    int no_steal;
    int64_t *trace;  /* when set: each tile's kernel start and end (CLOCK_MONOTONIC ns), 2 per tile */
    /* PW_OP_LAYER data: layer rows of PW_SLOTS values, each tile's layer and box, scratch per worker */
    const int64_t *layers;
    const int32_t *tile_layer, *tile_lo, *tile_hi;
    int64_t scratch_floats;
    float *scratch[PW_MAX_WORKERS];
    pw_sgemm_fn sgemm;

    int n_workers;
    pw_row rows[PW_MAX_WORKERS];
    pw_worker workers[PW_MAX_WORKERS];
    atomic_int ready, done, active, parked, stop, error;
    atomic_long steals;
    int generation;
    int avoided_cpu; /* the caller's CPU the other workers were last kept off, -1 before */
#ifdef __linux__
    cpu_set_t allowed; /* the CPUs of the thread that created the runtime: where the workers may go */
    int allowed_ok;
#endif
    _Atomic int64_t linger_ns; /* how long idle workers spin before they park */
    atomic_int hush;           /* pw_park: lingering workers park now (cleared by the next pw_run) */
    pthread_mutex_t park_lock;
    pthread_cond_t park_cond;
};

static void wake_parked(pw_runtime *rt) {
    if (atomic_load(&rt->parked) > 0) {
        pthread_mutex_lock(&rt->park_lock);
        pthread_cond_broadcast(&rt->park_cond);
        pthread_mutex_unlock(&rt->park_lock);
    }
}

static void push_quiet(pw_runtime *rt, int w, int32_t t) {
    pw_row *row = &rt->rows[w];
    int c = rt->col[t];
    pthread_mutex_lock(&row->lock);
    rt->next[t] = row->head[c];
    row->head[c] = t;
    row->mask |= (uint64_t)1 << c;
    pthread_mutex_unlock(&row->lock);
    atomic_fetch_add(&rt->ready, 1);
}

static void push(pw_runtime *rt, int w, int32_t t) {
    push_quiet(rt, w, t);
    wake_parked(rt);
}

static int32_t pop(pw_runtime *rt, int w) {
    pw_row *row = &rt->rows[w];
    int32_t t = -1;
    pthread_mutex_lock(&row->lock);
    if (row->mask) {
        int c = 63 - __builtin_clzll(row->mask); /* deepest column first: depth first */
        t = row->head[c];
        row->head[c] = rt->next[t];
        if (row->head[c] < 0) row->mask &= ~((uint64_t)1 << c);
    }
    pthread_mutex_unlock(&row->lock);
    if (t >= 0) atomic_fetch_sub(&rt->ready, 1);
    return t;
}

static int32_t steal(pw_runtime *rt, int w) {
    for (int i = 1; i < rt->n_workers; i++) {
        int32_t t = pop(rt, (w + i) % rt->n_workers);
        if (t >= 0) {
            atomic_fetch_add(&rt->steals, 1);
            return t;
        }
    }
    return -1;
}

/* the worker whose row tile t goes to when it becomes ready; -1: whoever made it ready */
static inline int home_of(const pw_runtime *rt, int32_t t) {
    return rt->home && rt->home[t] >= 0 ? rt->home[t] % rt->n_workers : -1;
}

static int run_kernel(pw_runtime *rt, int32_t t, int w) {
    switch (rt->op[t]) {
    case PW_OP_LAYER: {
        if (!rt->layers) return 1;
        if (!rt->scratch[w]) {
            size_t bytes = ((size_t)(rt->scratch_floats + PW_SCRATCH_HEADER) * sizeof(float) + 63) / 64 * 64;
            rt->scratch[w] = aligned_alloc(64, bytes);
            if (!rt->scratch[w]) return 1;
            memset(rt->scratch[w], 0xff, PW_SCRATCH_HEADER * sizeof(float)); /* no im2col cached */
        }
        return pw_tile_kernel(rt->layers + (int64_t)rt->tile_layer[t] * PW_SLOTS, rt->tile_lo + 4 * (int64_t)t,
                              rt->tile_hi + 4 * (int64_t)t, rt->scratch[w], rt->sgemm, rt->generation);
    }
    case PW_OP_TEST: {
        float acc = 0.0f;
        volatile float x = 1.0f; /* the spin is work, not to be optimised away */
        for (int32_t k = 0; k < rt->test_spin[t]; k++) x = x * 0.999f + 0.001f;
        for (int32_t k = rt->p_ptr[t]; k < rt->p_ptr[t + 1]; k++) acc += rt->test_out[rt->p_idx[k]];
        rt->test_out[t] = rt->test_bias[t] + 0.5f * acc + (x > 2.0f ? 1.0f : 0.0f);
        return 0;
    }
    default:
        return 1; /* unknown op code */
    }
}

/* 1 if worker w may find a tile: any row holds one, or (no_steal) its own row does */
static int work_for(pw_runtime *rt, int w) {
    if (atomic_load(&rt->ready) <= 0) return 0;
    if (!rt->no_steal) return 1;
    pthread_mutex_lock(&rt->rows[w].lock);
    const int mine = rt->rows[w].mask != 0;
    pthread_mutex_unlock(&rt->rows[w].lock);
    return mine;
}

/* a spinning worker's wait between two looks at the ready count: x86's pause hint, PW_SPIN_PAUSES times.
 * Without it the idle worker's loads of the counters ran back to back: 2 workers, the same process
 * alternating 0 and 4 pauses (Zen 3, AVX2), ResNet-50 0.97-0.98x the wall in four runs of 24-30 rounds,
 * kernel time 1-2% less; GoogLeNet 0.98-1.02x (noise) */
#define PW_SPIN_PAUSES 4
static inline void spin_pause(int n) {
#if defined(__x86_64__) || defined(__i386__)
    for (int k = 0; k < n; k++) __builtin_ia32_pause();
#else
    (void)n;
#endif
}

/* Wait for a ready tile or the end of the inference; 1 if there may be work. */
static int idle(pw_runtime *rt, int w) {
    for (int i = 0; i < PW_SPIN_ROUNDS; i++) {
        if (work_for(rt, w)) return 1;
        if (atomic_load(&rt->done) >= rt->n_tiles || atomic_load(&rt->error)) return 0;
        if ((i & 63) == 63) sched_yield();
        spin_pause(PW_SPIN_PAUSES);
    }
    pthread_mutex_lock(&rt->park_lock);
    atomic_fetch_add(&rt->parked, 1);
    while (!work_for(rt, w) && atomic_load(&rt->done) < rt->n_tiles && !atomic_load(&rt->error))
        pthread_cond_wait(&rt->park_cond, &rt->park_lock);
    atomic_fetch_sub(&rt->parked, 1);
    pthread_mutex_unlock(&rt->park_lock);
    return atomic_load(&rt->done) < rt->n_tiles;
}

static void finish_all(pw_runtime *rt) {
    pthread_mutex_lock(&rt->park_lock);
    pthread_cond_broadcast(&rt->park_cond);
    pthread_mutex_unlock(&rt->park_lock);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void engine(pw_runtime *rt, int w) {
    int32_t kept = -1;
    while (atomic_load(&rt->done) < rt->n_tiles && !atomic_load(&rt->error)) {
        int32_t t = kept >= 0 ? kept : pop(rt, w);
        kept = -1;
        if (t < 0 && !rt->no_steal) t = steal(rt, w);
        if (t < 0) {
            idle(rt, w);
            continue;
        }
        int64_t *trace = rt->trace;
        if (trace) trace[2 * (int64_t)t] = now_ns();
        if (run_kernel(rt, t, w)) {
            atomic_store(&rt->error, t + 1);
            finish_all(rt);
            return;
        }
        if (trace) trace[2 * (int64_t)t + 1] = now_ns();
        rt->ran_on[t] = w;
        for (int32_t k = rt->c_ptr[t]; k < rt->c_ptr[t + 1]; k++) {
            int32_t c = rt->c_idx[k];
            if (atomic_fetch_sub(&rt->pending[c], 1) == 1) {
                const int h = home_of(rt, c);
                if (h >= 0 && h != w)
                    push(rt, h, c);
                else if (kept < 0)
                    kept = c;
                else
                    push(rt, w, c);
            }
        }
        if (atomic_fetch_add(&rt->done, 1) + 1 == rt->n_tiles) finish_all(rt);
    }
}


/* spin until the next inference starts, the runtime stops, pw_park asks, or linger_ns pass */
static void linger(pw_runtime *rt, int seen) {
    const int64_t until = now_ns() + atomic_load(&rt->linger_ns);
    for (int i = 0;; i++) {
        if (__atomic_load_n(&rt->generation, __ATOMIC_ACQUIRE) != seen || atomic_load(&rt->stop)) return;
        if (atomic_load(&rt->hush)) return;
        if ((i & 255) == 255 && now_ns() > until) return;
        spin_pause(1);
    }
}

static void *worker_main(void *arg) {
    pw_worker *me = (pw_worker *)arg;
    pw_runtime *rt = me->rt;
    int seen = 0;
    for (;;) {
        if (seen) linger(rt, seen);
        pthread_mutex_lock(&rt->park_lock);
        while (rt->generation == seen && !atomic_load(&rt->stop)) pthread_cond_wait(&rt->park_cond, &rt->park_lock);
        seen = rt->generation;
        if (atomic_load(&rt->stop)) {
            pthread_mutex_unlock(&rt->park_lock);
            return NULL;
        }
        atomic_fetch_add(&rt->active, 1);
        pthread_mutex_unlock(&rt->park_lock);
        engine(rt, me->id);
        atomic_fetch_sub(&rt->active, 1);
    }
}

static void stop_workers(pw_runtime *rt) {
    pthread_mutex_lock(&rt->park_lock);
    atomic_store(&rt->stop, 1);
    pthread_cond_broadcast(&rt->park_cond);
    pthread_mutex_unlock(&rt->park_lock);
    for (int w = 1; w < rt->n_workers; w++) pthread_join(rt->workers[w].thread, NULL);
    atomic_store(&rt->stop, 0);
}

/* Workers 1..n-1 are threads; worker 0 is whoever calls pw_run. 0 on success. */
int pw_set_workers(pw_runtime *rt, int n) {
    if (n < 1 || n > PW_MAX_WORKERS) return 1;
    stop_workers(rt);
    rt->n_workers = n;
    rt->avoided_cpu = -1; /* new threads: pin them at the next run */
    for (int w = 0; w < n; w++) {
        rt->workers[w].rt = rt;
        rt->workers[w].id = w;
        if (w > 0 && pthread_create(&rt->workers[w].thread, NULL, worker_main, &rt->workers[w])) {
            rt->n_workers = w;
            return 2;
        }
    }
    return 0;
}

/* Grow the per-tile arrays to hold n tiles (they are never shrunk). 0 on success. */
static int reserve(pw_runtime *rt, int32_t n) {
    if (n + 1 <= rt->capacity) return 0;
    size_t bytes = sizeof(int32_t) * ((size_t)n + 1);
    int32_t **grow[] = {&rt->col, &rt->next, &rt->roots, &rt->ran_on};
    for (int i = 0; i < 4; i++) {
        int32_t *p = realloc(*grow[i], bytes);
        if (!p) return 1;
        *grow[i] = p;
    }
    atomic_int *pending = realloc(rt->pending, sizeof(atomic_int) * ((size_t)n + 1));
    if (!pending) return 1;
    rt->pending = pending;
    rt->capacity = n + 1;
    return 0;
}

/* The tile graph for the next inferences; call it between inferences, from the thread that calls pw_run
 * (co-execution swaps in the union of several requests' graphs this way, the engines stay). The arrays
 * must outlive their use (Python keeps them). col[t] < 64 is the depth column. 0 on success.
 * The swap waits under park_lock until no worker is inside the engine (pw_run need not: a worker still
 * inside from the last inference joins the next one, see there), and it marks every tile done, so a
 * worker that wakes late for the last inference leaves the engine at once instead of waiting for tiles
 * of a graph that is not running. */
int pw_set_graph(pw_runtime *rt, int32_t n_tiles, const int32_t *p_ptr, const int32_t *p_idx,
                 const int32_t *c_ptr, const int32_t *c_idx, const int32_t *op, const int32_t *col) {
    int err = 0;
    pthread_mutex_lock(&rt->park_lock);
    while (atomic_load(&rt->active) > 0) {
        pthread_mutex_unlock(&rt->park_lock);
        sched_yield();
        pthread_mutex_lock(&rt->park_lock);
    }
    if (n_tiles < 0 || reserve(rt, n_tiles)) {
        err = 1;
    } else {
        rt->n_tiles = n_tiles, rt->n_roots = 0;
        rt->p_ptr = p_ptr, rt->p_idx = p_idx, rt->c_ptr = c_ptr, rt->c_idx = c_idx, rt->op = op;
        /* the program of the old graph does not fit the new one: layer tiles fail until pw_set_program */
        rt->layers = NULL, rt->tile_layer = NULL, rt->tile_lo = NULL, rt->tile_hi = NULL;
        rt->trace = NULL; /* sized for the old graph */
        rt->home = NULL, rt->no_steal = 0;
        for (int32_t t = 0; t < n_tiles; t++) {
            rt->col[t] = col[t] < 0 ? 0 : (col[t] >= PW_MAX_COLS ? PW_MAX_COLS - 1 : col[t]);
            rt->ran_on[t] = -1;
            if (p_ptr[t + 1] == p_ptr[t]) rt->roots[rt->n_roots++] = t;
        }
        atomic_store(&rt->done, n_tiles);
    }
    pthread_mutex_unlock(&rt->park_lock);
    return err;
}

/* The graph arrays must outlive the runtime (Python keeps them); see pw_set_graph. */
pw_runtime *pw_create(int32_t n_tiles, const int32_t *p_ptr, const int32_t *p_idx, const int32_t *c_ptr,
                      const int32_t *c_idx, const int32_t *op, const int32_t *col, int n_workers) {
    pw_runtime *rt = calloc(1, sizeof(pw_runtime));
    if (!rt) return NULL;
    for (int w = 0; w < PW_MAX_WORKERS; w++) pthread_mutex_init(&rt->rows[w].lock, NULL);
    pthread_mutex_init(&rt->park_lock, NULL);
    pthread_cond_init(&rt->park_cond, NULL);
    if (pw_set_graph(rt, n_tiles, p_ptr, p_idx, c_ptr, c_idx, op, col)) {
        free(rt->col), free(rt->next), free(rt->roots), free(rt->ran_on), free(rt->pending), free(rt);
        return NULL;
    }
    rt->n_workers = 1;
#ifdef __linux__
    rt->allowed_ok = sched_getaffinity(0, sizeof rt->allowed, &rt->allowed) == 0 && CPU_COUNT(&rt->allowed) >= 2;
#endif
    atomic_store(&rt->linger_ns, PW_LINGER_NS);
    pw_set_workers(rt, n_workers); /* if fewer threads start, pw_workers says how many */
    return rt;
}

int pw_workers(const pw_runtime *rt) { return rt->n_workers; }
void pw_set_linger(pw_runtime *rt, int64_t ns) { atomic_store(&rt->linger_ns, ns < 0 ? 0 : ns); }
/* workers spinning for the next inference park now (a benchmark's other candidates run next) */
void pw_park(pw_runtime *rt) { atomic_store(&rt->hush, 1); }
int64_t pw_linger(pw_runtime *rt) { return atomic_load(&rt->linger_ns); }
long pw_steals(const pw_runtime *rt) { return atomic_load(&rt->steals); }
const int32_t *pw_ran_on(const pw_runtime *rt) { return rt->ran_on; }

/* Each tile's home worker from the next inference on (modulo the workers; -1: none), or NULL for none;
 * no_steal: workers run only their own rows' tiles (static lanes; then every tile needs a home or is
 * run by the worker that made it ready). Set between inferences; the array must outlive its use (Python
 * keeps it); a new graph drops it. */
void pw_set_homes(pw_runtime *rt, const int32_t *home, int no_steal) {
    rt->home = home;
    rt->no_steal = home ? no_steal : 0;
}

/* Record each tile's kernel start and end into trace (2 x n_tiles int64, ns) from the next inference on,
 * or stop recording (NULL). Set between inferences; the array must outlive its use (Python keeps it). */
void pw_set_trace(pw_runtime *rt, int64_t *trace) { rt->trace = trace; }

void pw_set_test_data(pw_runtime *rt, float *out, const float *bias, const int32_t *spin) {
    rt->test_out = out, rt->test_bias = bias, rt->test_spin = spin;
}

/* Layer kernels for op PW_OP_LAYER; the arrays must outlive the runtime (Python keeps them). Tile boxes
 * are int32 [n_tiles, 4]. Scratch already allocated is dropped, so a larger size takes effect. */
void pw_set_program(pw_runtime *rt, const int64_t *layers, const int32_t *tile_layer, const int32_t *tile_lo,
                    const int32_t *tile_hi, int64_t scratch_floats, pw_sgemm_fn sgemm) {
    rt->layers = layers, rt->tile_layer = tile_layer, rt->tile_lo = tile_lo, rt->tile_hi = tile_hi;
    rt->sgemm = sgemm;
    for (int w = 0; w < PW_MAX_WORKERS; w++) free(rt->scratch[w]), rt->scratch[w] = NULL;
    rt->scratch_floats = scratch_floats;
}

/* Keep workers 1.. off the CPU the caller (worker 0) runs on. Woken while that CPU was busy and the
 * others idle, the scheduler put a worker next to the caller on this VM, where it waited for the CPU
 * while holding tiles the caller needed: slower on 2 workers than on 1. Re-pinned only when the
 * caller's CPU changed. The workers' CPUs come from the runtime's creator, not from the caller: a caller
 * pinned to one CPU (a serving thread, a benchmark) must still find the workers off its CPU; read from
 * the caller, its one-CPU mask left a worker pinned to the caller's CPU by an earlier call (MobileNetV2:
 * 7.9 ms with worker 1 idle, 4.7 ms after). */
#ifdef __linux__
static void keep_off_caller(pw_runtime *rt, int cpu) {
    if (cpu < 0 || cpu == rt->avoided_cpu || rt->n_workers < 2 || !rt->allowed_ok) return;
    cpu_set_t others = rt->allowed;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) < 1) return;
    for (int w = 1; w < rt->n_workers; w++) pthread_setaffinity_np(rt->workers[w].thread, sizeof others, &others);
    rt->avoided_cpu = cpu;
}

/* The caller stays on its CPU for the inference (its own mask is restored after): when it parks for a
 * tile and a worker wakes it, the scheduler placed it on the waker's CPU (wake-affine), next to the
 * worker kept off the caller's CPU, and left the caller's CPU idle. Under a benchmark's protocol (50 ms
 * idle, one call, the timed call) MobileNetV2 took 7.8 ms that way, the caller ending the inference on
 * worker 1's CPU in 28 of 30 calls. 1 when the caller's mask was changed and `saved` holds it. */
static int hold_caller(pw_runtime *rt, int cpu, cpu_set_t *saved) {
    if (cpu < 0 || rt->n_workers < 2 || sched_getaffinity(0, sizeof *saved, saved) || CPU_COUNT(saved) < 2)
        return 0;
    cpu_set_t here;
    CPU_ZERO(&here);
    CPU_SET(cpu, &here);
    return sched_setaffinity(0, sizeof here, &here) == 0;
}
#endif

/* One inference. Returns 0, or 1 + the tile whose kernel failed.
 * It returns once done == n_tiles, without waiting for the other workers to leave the engine: every
 * kernel, ran_on and trace write of a tile comes before that tile's done increment, and a worker that
 * sees done == n_tiles holds no tile (its kept tile ran: every tile was taken and ran), so it only
 * leaves. Waiting for them cost a scheduler tick whenever a worker lost its core, e.g. to OpenMP's
 * spinning thread after an ATen call (experiments/tiles_stall.py). After a failed kernel the others
 * may still be inside theirs, so then it waits.
 * The next inference does not wait for such a worker either: it may find one still inside the engine,
 * which then takes part in the new inference. So the reset keeps this order, under park_lock (a worker
 * woken from parking enters only under it): the counters of the last inference are replaced while no
 * tile is visible (the rows are empty after a complete inference and emptied after a failed one,
 * which no worker is left in); the stamp (generation) is new before a tile becomes visible, so no
 * kernel takes a cached im2col of the last inference for this one; done is reset before the roots are
 * pushed, so a tile taken by a worker that comes in from the last inference is counted in this one. */
int pw_run(pw_runtime *rt) {
    atomic_store(&rt->hush, 0);
#ifdef __linux__
    const int cpu = sched_getcpu();
    keep_off_caller(rt, cpu);
    cpu_set_t callers;
    const int held = hold_caller(rt, cpu, &callers);
#endif
    pthread_mutex_lock(&rt->park_lock);
    for (int32_t t = 0; t < rt->n_tiles; t++) {
        atomic_store(&rt->pending[t], rt->p_ptr[t + 1] - rt->p_ptr[t]);
        rt->ran_on[t] = -1;
    }
    for (int w = 0; w < rt->n_workers; w++) {
        pw_row *row = &rt->rows[w];
        pthread_mutex_lock(&row->lock);
        for (int c = 0; c < PW_MAX_COLS; c++) row->head[c] = -1;
        row->mask = 0;
        pthread_mutex_unlock(&row->lock);
    }
    atomic_store(&rt->error, 0);
    atomic_store(&rt->ready, 0);
    atomic_store(&rt->steals, 0);
    __atomic_store_n(&rt->generation, rt->generation + 1, __ATOMIC_RELEASE); /* lingering workers read it */
    atomic_store(&rt->done, 0);
    for (int32_t i = 0; i < rt->n_roots; i++) {
        const int h = home_of(rt, rt->roots[i]);
        push_quiet(rt, h >= 0 ? h : i % rt->n_workers, rt->roots[i]);
    }
    atomic_fetch_add(&rt->active, 1);
    pthread_cond_broadcast(&rt->park_cond);
    pthread_mutex_unlock(&rt->park_lock);
    if (rt->n_tiles) engine(rt, 0);
    atomic_fetch_sub(&rt->active, 1);
#ifdef __linux__
    if (held) sched_setaffinity(0, sizeof callers, &callers);
#endif
    const int err = atomic_load(&rt->error);
    if (err) /* the other workers may still be running a kernel of this inference */
        while (atomic_load(&rt->active) > 0) sched_yield();
    return err;
}

void pw_destroy(pw_runtime *rt) {
    if (!rt) return;
    stop_workers(rt);
    for (int w = 0; w < PW_MAX_WORKERS; w++) free(rt->scratch[w]);
    free(rt->col), free(rt->next), free(rt->roots), free(rt->ran_on), free(rt->pending);
    free(rt);
}
