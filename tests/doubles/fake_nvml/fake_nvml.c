/*
 * fake_nvml.c - a fake libnvidia-ml.so.1 for sparkwatch's tests.
 *
 * The real nvidia-ml-py binding (module `pynvml`) loads this library with
 * CDLL("libnvidia-ml.so.1") and resolves every NVML entry point by name, so
 * the agent's NVML code runs through the genuine ctypes layer without a GPU.
 * Entry points that are not defined here are reported by pynvml as
 * NVML_ERROR_FUNCTION_NOT_FOUND, exactly like an older driver would.
 *
 * Configuration (see README.md next to this file):
 *   FAKE_NVML_PROFILE  gb10 (default) | gb10-noenergy | discrete; read at init.
 *   FAKE_NVML_CONTROL  optional path of a key=value control file, stat()ed on
 *                      every API call and re-parsed only when it changed.
 *
 * Every exported function takes one global mutex, so the library may be used
 * from several threads.  Struct layouts mirror the ctypes definitions in
 * pynvml.py (nvidia-ml-py 13.615.71).
 *
 * Build: gcc -std=c11 -Wall -Wextra -Werror -shared -fPIC -O2 -pthread \
 *            -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Only the NVML entry points are exported (see NVML_API). */
#define NVML_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* NVML types and constants (values as in nvml.h / pynvml.py)               */
/* ------------------------------------------------------------------------ */

typedef unsigned int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_CLOCK_SM = 1 };
enum { NVML_VALUE_TYPE_UNSIGNED_INT = 1 };
enum { NVML_FI_DEV_POWER_AVERAGE = 185, NVML_FI_DEV_POWER_INSTANT = 186 };
enum { NVML_POWER_SCOPE_GPU = 0 };

/* nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2) = sizeof | (2 << 24). */
#define NVML_MEMORY_V2_VERSION 0x02000028u
/* gpuInstanceId / computeInstanceId when MIG is disabled. */
#define NVML_INSTANCE_ID_NONE 0xFFFFFFFFu

typedef struct fake_device *nvmlDevice_t; /* handle = pointer to a static struct */

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* pynvml: c_nvmlProcessInfo_v3_t == c_nvmlProcessInfo_v2_t */

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    uint32_t fieldId;
    uint32_t scopeId;
    int64_t timestamp;   /* microseconds since the epoch */
    int64_t latencyUsec; /* age of the value; 0 = read just now */
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t layout");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");
_Static_assert(offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t layout");

/* ------------------------------------------------------------------------ */
/* Profiles                                                                  */
/* ------------------------------------------------------------------------ */

#define MAX_DEVICES 2
#define GIB (1024ULL * 1024ULL * 1024ULL)
#define MIB (1024ULL * 1024ULL)

#define DRIVER_VERSION "580.95.05"
#define CUDA_DRIVER_VERSION 13000
#define ENERGY_START_MJ 1234567890ULL

typedef struct {
    const char *id;             /* value of FAKE_NVML_PROFILE */
    unsigned int device_count;
    const char *name;
    const char *uuid[MAX_DEVICES];
    bool energy_supported;
    bool memory_info_supported; /* false on GB10: unified memory */
    bool power_limits_supported;
    unsigned int power_base_mw, power_per_util_mw;  /* power = base + k*util */
    unsigned int temp_base_c, temp_util_divisor;    /* temp = base + util/d */
    unsigned int sm_clock_base_mhz, sm_clock_per_util_mhz;
    unsigned int sm_clock_max_mhz;  /* nvmlDeviceGetMaxClockInfo(SM) */
    unsigned int mem_util_divisor;                  /* 0: memory util always 0 */
    unsigned long long memory_total, memory_base_used, memory_reserved;
    unsigned int power_limit_mw;     /* management = enforced = default limit */
    unsigned int power_limit_min_mw, power_limit_max_mw;
    unsigned int process_pid_base;                  /* pid of device i = base + i */
    unsigned long long process_memory;
    unsigned int pcie_gen, pcie_width;
} profile_t;

static const profile_t PROFILES[] = {
    {
        .id = "gb10",
        .device_count = 1,
        .name = "NVIDIA GB10",
        .uuid = {"GPU-5a1e0000-0000-4000-8000-000000000b10"},
        .energy_supported = true,
        .memory_info_supported = false,
        .power_limits_supported = false,
        .power_base_mw = 5000, .power_per_util_mw = 450,
        .temp_base_c = 40, .temp_util_divisor = 4,
        .sm_clock_base_mhz = 208, .sm_clock_per_util_mhz = 22,
        .sm_clock_max_mhz = 3003, /* what GB10s report; they run near 2418 under load */
        .mem_util_divisor = 0,
        .process_pid_base = 4242, .process_memory = 9 * GIB,
        .pcie_gen = 1, .pcie_width = 1, /* the bogus Gen1 x1 a GB10 reports */
    },
    {
        .id = "gb10-noenergy",
        .device_count = 1,
        .name = "NVIDIA GB10",
        .uuid = {"GPU-5a1e0000-0000-4000-8000-000000000b10"},
        .energy_supported = false,
        .memory_info_supported = false,
        .power_limits_supported = false,
        .power_base_mw = 5000, .power_per_util_mw = 450,
        .temp_base_c = 40, .temp_util_divisor = 4,
        .sm_clock_base_mhz = 208, .sm_clock_per_util_mhz = 22,
        .sm_clock_max_mhz = 3003,
        .mem_util_divisor = 0,
        .process_pid_base = 4242, .process_memory = 9 * GIB,
        .pcie_gen = 1, .pcie_width = 1,
    },
    {
        .id = "discrete",
        .device_count = 2,
        .name = "NVIDIA H100 80GB HBM3",
        .uuid = {"GPU-d15c0000-0000-4000-8000-000000000000",
                 "GPU-d15c0000-0000-4000-8000-000000000001"},
        .energy_supported = true,
        .memory_info_supported = true,
        .power_limits_supported = true,
        .power_base_mw = 70000, .power_per_util_mw = 6300,
        .temp_base_c = 35, .temp_util_divisor = 3,
        .sm_clock_base_mhz = 345, .sm_clock_per_util_mhz = 15,
        .sm_clock_max_mhz = 1980,
        .mem_util_divisor = 2,
        .memory_total = 85520809984ULL, .memory_base_used = 1 * GIB,
        .memory_reserved = 512 * MIB,
        .power_limit_mw = 700000, .power_limit_min_mw = 200000,
        .power_limit_max_mw = 700000,
        .process_pid_base = 5000, .process_memory = 20 * GIB,
        .pcie_gen = 5, .pcie_width = 16,
    },
};
#define PROFILE_COUNT (sizeof(PROFILES) / sizeof(PROFILES[0]))

/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

struct fake_device {
    unsigned int index;
    unsigned long long energy_mj;   /* whole millijoules */
    unsigned long long energy_rem;  /* remainder in mW*ns (< 1e9) */
};

#define MAX_FAIL 16
#define FN_NAME_MAX 96

typedef struct {
    unsigned int util;           /* util=, percent, clamped to 0..100 */
    bool power_override;         /* power_mw= present */
    unsigned int power_mw;
    bool lost;                   /* lost=1 */
    nvmlReturn_t init_error;     /* init_error=, 0 = none */
    size_t fail_count;           /* fail=<function>:<code> */
    struct {
        char function[FN_NAME_MAX];
        nvmlReturn_t code;
    } fail[MAX_FAIL];
    bool clock_events_override;  /* clock_events= present */
    unsigned int clock_events;   /* clock_events=<bitmask>: the current clock event reasons */
    unsigned int sm_clock_mhz;   /* sm_clock_mhz=: the SM clock while clock_events= is set (0: formula) */
    size_t fail_field_count;     /* fail_field=<fieldId>:<scopeId>:<code> */
    struct {
        unsigned int field_id, scope_id;
        nvmlReturn_t code;
    } fail_field[MAX_FAIL];
} control_t;

/* Identity of the control file as last parsed, to skip unchanged files. */
typedef struct {
    bool valid;    /* a stat result is cached */
    bool exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} control_stamp_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_init_count;          /* nvmlInit refcount; 0 = uninitialised */
static const profile_t *g_profile;
static struct fake_device g_devices[MAX_DEVICES];
static long long g_last_tick_ns;           /* CLOCK_MONOTONIC of the last energy update */
static bool g_have_control_path;
static char g_control_path[4096];
static control_stamp_t g_control_stamp;
static control_t g_control;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Current board power in mW: control override, else the profile formula. */
static unsigned int power_mw(void)
{
    if (g_control.power_override)
        return g_control.power_mw;
    return g_profile->power_base_mw + g_profile->power_per_util_mw * g_control.util;
}

/* Add power * dt to one device's energy counter, exactly, in integers. */
static void accrue_energy(struct fake_device *d, unsigned long long mw, long long dt_ns)
{
    if (dt_ns <= 0)
        return;
    unsigned long long sec = (unsigned long long)dt_ns / 1000000000ULL;
    unsigned long long nsec = (unsigned long long)dt_ns % 1000000000ULL;
    d->energy_mj += mw * sec;               /* mW * s = mJ */
    d->energy_rem += mw * nsec;             /* mW * ns = 1e-9 mJ */
    d->energy_mj += d->energy_rem / 1000000000ULL;
    d->energy_rem %= 1000000000ULL;
}

static void reset_devices(void)
{
    memset(g_devices, 0, sizeof g_devices);
    for (unsigned int i = 0; i < MAX_DEVICES; i++) {
        g_devices[i].index = i;
        g_devices[i].energy_mj = ENERGY_START_MJ;
    }
    g_last_tick_ns = monotonic_ns();
}

/* Strip leading and trailing blanks in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Parse a whole decimal unsigned number; false on junk or overflow. */
static bool parse_uint(const char *s, unsigned int *out)
{
    char *end;
    if (*s == '\0' || *s == '-')
        return false;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > 0xFFFFFFFFUL)
        return false;
    *out = (unsigned int)v;
    return true;
}

/* Parse "<a>:<b>" where <b> is an unsigned number; splits at the last ':'. */
static bool split_code(char *s, char **head, unsigned int *code)
{
    char *colon = strrchr(s, ':');
    if (colon == NULL)
        return false;
    *colon = '\0';
    *head = trim(s);
    return parse_uint(trim(colon + 1), code);
}

/* Apply one "key=value" line.  Unknown keys and malformed values are ignored. */
static void apply_control_line(control_t *c, char *line)
{
    char *eq = strchr(line, '=');
    if (eq == NULL)
        return;
    *eq = '\0';
    char *key = trim(line);
    char *value = trim(eq + 1);
    unsigned int v;

    if (strcmp(key, "util") == 0) {
        if (parse_uint(value, &v))
            c->util = v > 100 ? 100 : v;
    } else if (strcmp(key, "power_mw") == 0) {
        if (parse_uint(value, &v)) {
            c->power_override = true;
            c->power_mw = v;
        }
    } else if (strcmp(key, "clock_events") == 0) {
        if (parse_uint(value, &v)) {
            c->clock_events_override = true;
            c->clock_events = v;
        }
    } else if (strcmp(key, "sm_clock_mhz") == 0) {
        if (parse_uint(value, &v))
            c->sm_clock_mhz = v;
    } else if (strcmp(key, "lost") == 0) {
        if (parse_uint(value, &v))
            c->lost = v != 0;
    } else if (strcmp(key, "init_error") == 0) {
        if (parse_uint(value, &v))
            c->init_error = v;
    } else if (strcmp(key, "fail") == 0) {
        char *fn;
        if (c->fail_count < MAX_FAIL && split_code(value, &fn, &v) && *fn != '\0' &&
            strlen(fn) < FN_NAME_MAX) {
            strcpy(c->fail[c->fail_count].function, fn);
            c->fail[c->fail_count].code = v;
            c->fail_count++;
        }
    } else if (strcmp(key, "fail_field") == 0) {
        char *head;
        unsigned int field_id, scope_id;
        char *colon;
        if (c->fail_field_count < MAX_FAIL && split_code(value, &head, &v) &&
            (colon = strchr(head, ':')) != NULL) {
            *colon = '\0';
            if (parse_uint(trim(head), &field_id) && parse_uint(trim(colon + 1), &scope_id)) {
                c->fail_field[c->fail_field_count].field_id = field_id;
                c->fail_field[c->fail_field_count].scope_id = scope_id;
                c->fail_field[c->fail_field_count].code = v;
                c->fail_field_count++;
            }
        }
    }
}

static void parse_control_file(control_t *c, const char *path)
{
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return; /* missing / unreadable: all defaults */
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        apply_control_line(c, s);
    }
    fclose(f);
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/*
 * Re-read the control file if it changed since the last parse.  Besides
 * mtime (ns) and size, the inode and ctime are compared too, so an atomic
 * os.replace() of a same-sized file within one timestamp tick is still seen.
 * With force, the file is parsed regardless (used at init).
 */
static void refresh_control(bool force)
{
    if (!g_have_control_path) {
        if (force)
            memset(&g_control, 0, sizeof g_control);
        return;
    }
    struct stat st;
    control_stamp_t now = {.valid = true};
    if (stat(g_control_path, &st) == 0) {
        now.exists = true;
        now.dev = st.st_dev;
        now.ino = st.st_ino;
        now.size = st.st_size;
        now.mtime = st.st_mtim;
        now.ctime = st.st_ctim;
    }
    const control_stamp_t *old = &g_control_stamp;
    bool changed = force || !old->valid || old->exists != now.exists ||
                   (now.exists && (old->dev != now.dev || old->ino != now.ino ||
                                   old->size != now.size || !same_time(&old->mtime, &now.mtime) ||
                                   !same_time(&old->ctime, &now.ctime)));
    if (!changed)
        return;
    g_control_stamp = now;
    if (now.exists)
        parse_control_file(&g_control, g_control_path);
    else
        memset(&g_control, 0, sizeof g_control);
}

/*
 * Bring the emulation up to date at the start of an API call: accrue energy
 * for the power that was in effect since the previous call, then pick up any
 * control-file change (which only affects the time after this call).
 */
static void tick(void)
{
    long long now = monotonic_ns();
    if (g_profile->energy_supported) {
        unsigned int mw = power_mw();
        for (unsigned int i = 0; i < g_profile->device_count; i++)
            accrue_energy(&g_devices[i], mw, now - g_last_tick_ns);
    }
    g_last_tick_ns = now;
    refresh_control(false);
}

/* Return code injected with fail=<function>:<code>, or NVML_SUCCESS. */
static nvmlReturn_t injected_failure(const char *function)
{
    for (size_t i = 0; i < g_control.fail_count; i++)
        if (strcmp(g_control.fail[i].function, function) == 0)
            return g_control.fail[i].code;
    return NVML_SUCCESS;
}

/*
 * Common prologue of every non-init entry point.  Takes the lock (the caller
 * must release it through api_end) and returns NVML_SUCCESS when the call
 * may proceed.
 */
static nvmlReturn_t api_begin(const char *function)
{
    pthread_mutex_lock(&g_lock);
    if (g_init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    tick();
    return injected_failure(function);
}

/* Prologue of a per-device entry point: api_begin plus handle/lost checks. */
static nvmlReturn_t device_begin(const char *function, nvmlDevice_t device)
{
    nvmlReturn_t rc = api_begin(function);
    if (rc != NVML_SUCCESS)
        return rc;
    bool known = false;
    for (unsigned int i = 0; i < g_profile->device_count; i++)
        if (device == &g_devices[i])
            known = true;
    if (!known)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g_control.lost)
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static nvmlReturn_t api_end(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Copy a NUL-terminated string into a caller buffer of `length` bytes. */
static nvmlReturn_t copy_string(char *buf, unsigned int length, const char *s)
{
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s);
    if (length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t do_init(const char *function)
{
    pthread_mutex_lock(&g_lock);

    const char *wanted = getenv("FAKE_NVML_PROFILE");
    if (wanted == NULL || *wanted == '\0')
        wanted = "gb10";
    const profile_t *profile = NULL;
    for (size_t i = 0; i < PROFILE_COUNT; i++)
        if (strcmp(PROFILES[i].id, wanted) == 0)
            profile = &PROFILES[i];
    if (profile == NULL)
        return api_end(NVML_ERROR_UNKNOWN);

    const char *path = getenv("FAKE_NVML_CONTROL");
    g_have_control_path = path != NULL && *path != '\0';
    if (g_have_control_path &&
        (size_t)snprintf(g_control_path, sizeof g_control_path, "%s", path) >= sizeof g_control_path)
        return api_end(NVML_ERROR_UNKNOWN); /* path too long */
    memset(&g_control_stamp, 0, sizeof g_control_stamp);
    refresh_control(true);

    if (g_control.init_error != NVML_SUCCESS)
        return api_end(g_control.init_error);
    nvmlReturn_t rc = injected_failure(function);
    if (rc != NVML_SUCCESS)
        return api_end(rc);

    /* Every successful init starts from a fresh state. */
    g_profile = profile;
    reset_devices();
    g_init_count++;
    return api_end(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NVML_INIT_FLAG_NO_GPUS / NO_ATTACH: nothing to do here */
    return do_init(__func__);
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(__func__);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
    return do_init(__func__);
}

/* Like NVML, init/shutdown are reference counted. */
NVML_API nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = api_begin(__func__);
    if (rc == NVML_SUCCESS)
        g_init_count--;
    return api_end(rc);
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt request issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 25: return "Argument version mismatch";
    case 999: return "Unknown Error";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------------------ */
/* System queries                                                            */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = api_begin(__func__);
    if (rc == NVML_SUCCESS)
        rc = copy_string(version, length, DRIVER_VERSION);
    return api_end(rc);
}

static nvmlReturn_t cuda_driver_version(const char *function, int *cudaDriverVersion)
{
    nvmlReturn_t rc = api_begin(function);
    if (rc == NVML_SUCCESS) {
        if (cudaDriverVersion == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *cudaDriverVersion = CUDA_DRIVER_VERSION;
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return cuda_driver_version(__func__, cudaDriverVersion);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return cuda_driver_version(__func__, cudaDriverVersion);
}

/* ------------------------------------------------------------------------ */
/* Enumeration                                                               */
/* ------------------------------------------------------------------------ */

/* Works even with lost=1: the device is still enumerated, just unusable. */
NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t rc = api_begin(__func__);
    if (rc == NVML_SUCCESS) {
        if (deviceCount == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *deviceCount = g_profile->device_count;
    }
    return api_end(rc);
}

/* With lost=1 this returns GPU_IS_LOST, as documented for the real call. */
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = api_begin(__func__);
    if (rc == NVML_SUCCESS) {
        if (device == NULL || index >= g_profile->device_count)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (g_control.lost)
            rc = NVML_ERROR_GPU_IS_LOST;
        else
            *device = &g_devices[index];
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS)
        rc = copy_string(name, length, g_profile->name);
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS)
        rc = copy_string(uuid, length, g_profile->uuid[device->index]);
    /* FAKE_NVML_UUID_TAG (up to 12 hex digits) ends every UUID: several fake "hosts" on one machine
       report GPUs of their own, as real ones would (a shared UUID means one GPU counted twice). */
    const char *tag = getenv("FAKE_NVML_UUID_TAG");
    if (rc == NVML_SUCCESS && tag != NULL && *tag != '\0') {
        size_t n = strlen(uuid), t = strlen(tag);
        if (t > 12 || t > n)
            rc = NVML_ERROR_UNKNOWN;
        else
            memcpy(uuid + n - t, tag, t);
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (index == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *index = device->index;
    }
    return api_end(rc);
}

/* ------------------------------------------------------------------------ */
/* Power and energy                                                          */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (power == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *power = power_mw();
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                           unsigned long long *energy)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (!g_profile->energy_supported)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (energy == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *energy = device->energy_mj;
    }
    return api_end(rc);
}

/* Return code for one field-value entry, honouring fail_field= injections. */
static nvmlReturn_t field_status(const nvmlFieldValue_t *v)
{
    for (size_t i = 0; i < g_control.fail_field_count; i++)
        if (g_control.fail_field[i].field_id == v->fieldId &&
            g_control.fail_field[i].scope_id == v->scopeId)
            return g_control.fail_field[i].code;
    bool power_field = v->fieldId == NVML_FI_DEV_POWER_INSTANT ||
                       v->fieldId == NVML_FI_DEV_POWER_AVERAGE;
    /* Only the GPU scope is emulated; MODULE (1) and others are unsupported. */
    if (!power_field || v->scopeId != NVML_POWER_SCOPE_GPU)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* Per-entry failures go into nvmlReturn; the call itself still succeeds. */
NVML_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                nvmlFieldValue_t *values)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS && (valuesCount < 0 || (valuesCount > 0 && values == NULL)))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        int64_t now_us = realtime_us();
        for (int i = 0; i < valuesCount; i++) {
            nvmlFieldValue_t *v = &values[i];
            v->timestamp = now_us;
            v->latencyUsec = 0;
            memset(&v->value, 0, sizeof v->value);
            v->nvmlReturn = field_status(v);
            if (v->nvmlReturn == NVML_SUCCESS) {
                v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
                v->value.uiVal = power_mw();
            }
        }
    }
    return api_end(rc);
}

/* Unsupported on GB10; fixed limits on the discrete profile. */
static nvmlReturn_t power_limit(const char *function, nvmlDevice_t device, unsigned int *limit)
{
    nvmlReturn_t rc = device_begin(function, device);
    if (rc == NVML_SUCCESS) {
        if (!g_profile->power_limits_supported)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (limit == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *limit = g_profile->power_limit_mw;
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_limit(__func__, device, limit);
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_limit(__func__, device, limit);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                                unsigned int *defaultLimit)
{
    return power_limit(__func__, device, defaultLimit);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                                    unsigned int *minLimit,
                                                                    unsigned int *maxLimit)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (!g_profile->power_limits_supported)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (minLimit == NULL || maxLimit == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else {
            *minLimit = g_profile->power_limit_min_mw;
            *maxLimit = g_profile->power_limit_max_mw;
        }
    }
    return api_end(rc);
}

/* ------------------------------------------------------------------------ */
/* Utilisation, thermals, clocks                                             */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                     nvmlUtilization_t *utilization)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (utilization == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else {
            utilization->gpu = g_control.util;
            /* GB10 has no dedicated memory controller counter: always 0. */
            utilization->memory = g_profile->mem_util_divisor == 0
                                      ? 0
                                      : g_control.util / g_profile->mem_util_divisor;
        }
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType,
                                                unsigned int *temp)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (temp == NULL || sensorType != NVML_TEMPERATURE_GPU)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *temp = g_profile->temp_base_c + g_control.util / g_profile->temp_util_divisor;
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type,
                                              unsigned int *clock)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (clock == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (type != NVML_CLOCK_SM)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (g_control.clock_events_override && g_control.sm_clock_mhz > 0)
            *clock = g_control.sm_clock_mhz;
        else
            *clock = g_profile->sm_clock_base_mhz + g_profile->sm_clock_per_util_mhz * g_control.util;
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type,
                                                 unsigned int *clock)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (clock == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (type != NVML_CLOCK_SM)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else
            *clock = g_profile->sm_clock_max_mhz;
    }
    return api_end(rc);
}

/* Why the clocks are below their maximum: the control file's bitmask, else GPU idle (0x1) at 0 % and
 * nothing under load (what GB10s report: clocks_event_reasons.active 0x0 while busy). */
static nvmlReturn_t clock_events(const char *function, nvmlDevice_t device, unsigned long long *reasons)
{
    nvmlReturn_t rc = device_begin(function, device);
    if (rc == NVML_SUCCESS) {
        if (reasons == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (g_control.clock_events_override)
            *reasons = g_control.clock_events;
        else
            *reasons = g_control.util == 0 ? 0x1ULL : 0x0ULL;
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                              unsigned long long *reasons)
{
    return clock_events(__func__, device, reasons);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                 unsigned long long *reasons)
{
    return clock_events(__func__, device, reasons);
}

/* ------------------------------------------------------------------------ */
/* Memory and processes                                                      */
/* ------------------------------------------------------------------------ */

/* Framebuffer in use: a fixed base (which includes the reserved part) plus
 * the emulated process. */
static unsigned long long memory_used(void)
{
    return g_profile->memory_base_used + g_profile->process_memory;
}

/* GB10 has unified memory: NVML reports the framebuffer as unsupported. */
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (!g_profile->memory_info_supported)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (memory == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else {
            memory->total = g_profile->memory_total;
            memory->used = memory_used();
            memory->free = memory->total - memory->used;
        }
    }
    return api_end(rc);
}

/*
 * v2 splits the reservation out of "used", as NVML does: v1.used = reserved
 * + allocated, v2.used = allocated, and total = reserved + used + free in v2.
 */
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (!g_profile->memory_info_supported)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (memory == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (memory->version != NVML_MEMORY_V2_VERSION)
            rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else {
            memory->total = g_profile->memory_total;
            memory->reserved = g_profile->memory_reserved;
            memory->used = memory_used() - g_profile->memory_reserved;
            memory->free = memory->total - memory_used();
        }
    }
    return api_end(rc);
}

/*
 * NVML sizing protocol: if infos is NULL or *infoCount is too small, set
 * *infoCount to the number of processes and return INSUFFICIENT_SIZE;
 * otherwise fill infos, set *infoCount and return SUCCESS.
 */
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                               unsigned int *infoCount,
                                                               nvmlProcessInfo_t *infos)
{
    const unsigned int count = 1; /* one process per device */
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (infoCount == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (infos == NULL || *infoCount < count) {
            *infoCount = count;
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        } else {
            infos[0].pid = g_profile->process_pid_base + device->index;
            infos[0].usedGpuMemory = g_profile->process_memory;
            infos[0].gpuInstanceId = NVML_INSTANCE_ID_NONE;
            infos[0].computeInstanceId = NVML_INSTANCE_ID_NONE;
            *infoCount = count;
        }
    }
    return api_end(rc);
}

/* ------------------------------------------------------------------------ */
/* PCIe                                                                      */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device,
                                                           unsigned int *currLinkGen)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (currLinkGen == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *currLinkGen = g_profile->pcie_gen;
    }
    return api_end(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device,
                                                      unsigned int *currLinkWidth)
{
    nvmlReturn_t rc = device_begin(__func__, device);
    if (rc == NVML_SUCCESS) {
        if (currLinkWidth == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *currLinkWidth = g_profile->pcie_width;
    }
    return api_end(rc);
}
