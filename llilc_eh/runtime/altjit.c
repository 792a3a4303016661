/*
 * llilc-eh as CoreCLR 3.1's alt JIT: the native part, kept small on purpose.
 *
 * Why C at all: the runtime loads a JIT with dlopen and calls jitStartup/getJit, then calls
 * compileMethod through a C++ vtable on its own threads.  Everything that decides anything
 * lives in Python (llilc_eh.runtime.service); this file only
 *   - answers the loader (getJit, the JIT-EE version GUID the 3.1.23 runtime checks),
 *   - declines fast, without touching Python, the methods that are not ours (no EH clause, not
 *     synchronized -- the JIT's own monitor clause is EH too -- and no selection by name: the
 *     runtime offers its alt JIT *every* method, IL stubs included),
 *   - embeds libpython once (no signal handlers: CoreCLR owns them), releases the GIL, and
 *     takes it again per compile (compileMethod comes from several threads),
 *   - exports llilc_call_trapped, which runs one JIT-EE slot under runWithErrorTrap so that a
 *     C++/PAL exception thrown by the runtime never unwinds through Python's ctypes frames.
 * Any failure on the Python side is a decline (CORJIT_SKIPPED): RyuJIT then compiles the method.
 *
 * Facts (dotnet/coreclr v3.1.23, src/inc/corjit.h, corinfo.h, corjitflags.h; checked in the
 * runtime, see ../shared/ALTJIT.md): ICorJitCompiler has 7 virtual slots; CORINFO_METHOD_INFO
 * holds EHcount at byte 32; ICorJitInfo slot 113 is runWithErrorTrap (returns a C++ bool).
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CORJIT_OK 0
#define CORJIT_SKIPPED 0x80000004u
#define SLOT_RUN_WITH_ERROR_TRAP 113
#define EHCOUNT_OFFSET 32 /* CORINFO_METHOD_INFO: ftn, scope, ILCode, ILCodeSize, maxStack, EHcount */
#define SLOT_GET_METHOD_ATTRIBS 0
#define CORINFO_FLG_SYNCH 0x00000020   /* corinfo.h CorInfoFlag: a synchronized method */

/* d609bed1-7831-49fc-bd49-b6f054dd4d46 as a GUID in memory (Data1..3 little-endian). */
static const unsigned char JIT_EE_VERSION[16] = {
    0xd1, 0xbe, 0x09, 0xd6, 0x31, 0x78, 0xfc, 0x49,
    0xbd, 0x49, 0xb6, 0xf0, 0x54, 0xdd, 0x4d, 0x46};

typedef struct { void **vtable; } Interface;

/* ---- the trapped call: one JIT-EE slot with up to 12 integer/pointer arguments ----------- */

#define MAX_ARGS 12   /* `this` included; allocMem takes 9 */
typedef uint64_t (*slot_t)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                           uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

typedef struct {
    void *function;
    uint64_t args[MAX_ARGS];
    uint64_t result;
} TrappedCall;

static void run_trapped(void *p)
{
    TrappedCall *c = (TrappedCall *)p;
    /* SysV passes the first six integer arguments in registers and the rest on the stack;
       a callee that takes fewer simply ignores the extra ones. */
    c->result = ((slot_t)c->function)(c->args[0], c->args[1], c->args[2], c->args[3],
                                       c->args[4], c->args[5], c->args[6], c->args[7],
                                       c->args[8], c->args[9], c->args[10], c->args[11]);
}

/* Call `function(args...)` under comp->runWithErrorTrap.  Returns 1 when it returned normally
   (its RAX in *result), 0 when the runtime trapped an exception.  Exported for ctypes. */
__attribute__((visibility("default")))
int llilc_call_trapped(void *comp, void *function, const uint64_t *args, int nargs, uint64_t *result)
{
    TrappedCall call;
    memset(&call, 0, sizeof call);
    call.function = function;
    if (nargs < 0 || nargs > MAX_ARGS)
        return 0;
    for (int i = 0; i < nargs; i++)
        call.args[i] = args[i];
    typedef unsigned char (*trap_t)(void *, void (*)(void *), void *);   /* C++ bool: AL only */
    trap_t trap = (trap_t)((Interface *)comp)->vtable[SLOT_RUN_WITH_ERROR_TRAP];
    unsigned char ok = trap(comp, run_trapped, &call);
    *result = call.result;
    return ok ? 1 : 0;
}

/* ---- Python, embedded once ------------------------------------------------------------- */

static pthread_once_t python_once = PTHREAD_ONCE_INIT;
static PyObject *service_compile;    /* llilc_eh.runtime.service.compile_method, or NULL */
static int all_methods;              /* LLILC_EH_ALL_METHODS=1: selection by name, ask Python */

/* Said on stderr and, for `llilc-eh run`'s report, as one event line (so that a run whose
   Python never started is not mistaken for a run with nothing to compile). */
static void report_startup_failure(const char *what)
{
    fprintf(stderr, "llilc-eh altjit: %s; every method is left to RyuJIT\n", what);
    const char *events = getenv("LLILC_EH_EVENTS");
    FILE *f = events ? fopen(events, "a") : NULL;
    if (f != NULL) {
        fputs("{\"event\": \"startup-failed\", \"reason\": \"", f);
        for (const char *p = what; *p; p++)
            if (*p >= 0x20 && *p != '"' && *p != '\\')
                fputc(*p, f);
        fputs("\"}\n", f);
        fclose(f);
    }
}

/* The runtime dlopens us RTLD_LOCAL, so libpython (our dependency) is loaded local too and
   Python's own extension modules (_ctypes, ...) would not find its symbols: promote it. */
static int make_libpython_global(void)
{
    Dl_info where;
    if (!dladdr((void *)&Py_InitializeFromConfig, &where) || where.dli_fname == NULL)
        return 0;
    return dlopen(where.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != NULL;
}

static void start_python(void)
{
    const char *python = getenv("LLILC_EH_PYTHON");   /* the venv's python: prefix, site-packages */
    const char *repo = getenv("LLILC_EH_REPO");
    if (python == NULL || getenv("LLILC_EH_RUN_CONFIG") == NULL) {
        report_startup_failure("LLILC_EH_PYTHON / LLILC_EH_RUN_CONFIG not set (use `llilc-eh run`)");
        return;
    }
    if (!make_libpython_global()) {
        report_startup_failure("libpython could not be made global (dlopen RTLD_NOLOAD failed)");
        return;
    }
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;   /* CoreCLR owns SIGSEGV, SIGINT, ... */
    config.parse_argv = 0;
    config.user_site_directory = 0;
    /* Naming the venv's interpreter as the executable makes Python find pyvenv.cfg, hence the
       venv's site-packages, and gives sys.executable a real Python for the LLVM workers. */
    PyStatus status = PyConfig_SetBytesString(&config, &config.executable, python);
    if (!PyStatus_Exception(status))
        status = PyConfig_SetBytesString(&config, &config.program_name, python);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        report_startup_failure(status.err_msg ? status.err_msg : "Python did not start");
        return;
    }
    if (repo != NULL) {
        PyObject *path = PySys_GetObject("path");          /* borrowed */
        PyObject *item = PyUnicode_DecodeFSDefault(repo);
        if (path != NULL && item != NULL)
            PyList_Insert(path, 0, item);
        Py_XDECREF(item);
    }
    PyObject *module = PyImport_ImportModule("llilc_eh.runtime.service");
    if (module != NULL) {
        PyObject *attach = PyObject_GetAttrString(module, "attach");
        PyObject *r = attach ? PyObject_CallFunction(attach, "K",
                                   (unsigned long long)(uintptr_t)llilc_call_trapped) : NULL;
        if (r != NULL)
            service_compile = PyObject_GetAttrString(module, "compile_method");
        Py_XDECREF(r);
        Py_XDECREF(attach);
        Py_DECREF(module);
    }
    if (service_compile == NULL) {
        PyErr_Print();
        report_startup_failure("llilc_eh.runtime.service did not load");
    }
    PyEval_SaveThread();   /* from now on every compile takes the GIL for itself */
}

/* ---- ICorJitCompiler ------------------------------------------------------------------- */

static unsigned long offered;   /* compileMethod calls: every method the runtime JIT-compiled */

/* At exit: how many methods the runtime offered us, for the summary (compiled by us + by RyuJIT);
   plain C, no Python, so it cannot disturb a runtime that is shutting down. */
static void report_offered(void)
{
    const char *events = getenv("LLILC_EH_EVENTS");
    FILE *f = events ? fopen(events, "a") : NULL;
    if (f != NULL) {
        fprintf(f, "{\"event\": \"offered\", \"methods\": %lu}\n", __atomic_load_n(&offered, __ATOMIC_SEQ_CST));
        fclose(f);
    }
}

/* A synchronized method has EH even when its IL has none: the JIT adds its own fault clause
   around the body to release the monitor (clauses/synchronized.py), so it is ours like any
   method with clauses.  getMethodAttribs (trapped: it may throw) on CORINFO_METHOD_INFO.ftn. */
static int synchronized(void *comp, void *info)
{
    uint64_t args[2] = {(uint64_t)(uintptr_t)comp, (uint64_t)(uintptr_t)*(void *const *)info};
    uint64_t attribs = 0;
    void *slot = ((Interface *)comp)->vtable[SLOT_GET_METHOD_ATTRIBS];
    if (!llilc_call_trapped(comp, slot, args, 2, &attribs))
        return 0;
    return ((uint32_t)attribs & CORINFO_FLG_SYNCH) != 0;
}

static uint32_t compile_method(void *self, void *comp, void *info, unsigned flags,
                               uint8_t **entry, uint32_t *size)
{
    (void)self;
    __atomic_add_fetch(&offered, 1, __ATOMIC_SEQ_CST);
    unsigned eh_count = *(const unsigned *)((const char *)info + EHCOUNT_OFFSET);
    if (eh_count == 0 && !all_methods && !synchronized(comp, info))
        return CORJIT_SKIPPED;
    pthread_once(&python_once, start_python);
    if (service_compile == NULL)
        return CORJIT_SKIPPED;
    uint32_t result = CORJIT_SKIPPED;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(service_compile, "KKIKK",
                                        (unsigned long long)(uintptr_t)comp,
                                        (unsigned long long)(uintptr_t)info, flags,
                                        (unsigned long long)(uintptr_t)entry,
                                        (unsigned long long)(uintptr_t)size);
    if (r != NULL) {
        unsigned long v = PyLong_AsUnsignedLong(r);
        if (!PyErr_Occurred())
            result = (uint32_t)v;
        Py_DECREF(r);
    }
    if (PyErr_Occurred()) {   /* the service catches its own errors; this is a last resort */
        PyErr_Print();
        result = CORJIT_SKIPPED;
    }
    PyGILState_Release(gil);
    return result;
}

static void clear_cache(void *self) { (void)self; }
static int is_cache_cleanup_required(void *self) { (void)self; return 0; }
static void process_shutdown_work(void *self, void *info) { (void)self; (void)info; }

static void get_version_identifier(void *self, void *guid)
{
    (void)self;
    memcpy(guid, JIT_EE_VERSION, sizeof JIT_EE_VERSION);
}

static unsigned get_max_simd_length(void *self, void *flags) { (void)self; (void)flags; return 0; }
static void set_real_jit(void *self, void *jit) { (void)self; (void)jit; }

static void *compiler_vtable[7] = {
    (void *)compile_method, (void *)clear_cache, (void *)is_cache_cleanup_required,
    (void *)process_shutdown_work, (void *)get_version_identifier,
    (void *)get_max_simd_length, (void *)set_real_jit};
static Interface compiler = {compiler_vtable};

/* Called once when the runtime loads us, before any compileMethod. */
__attribute__((visibility("default"))) void jitStartup(void *host)
{
    (void)host;
    const char *sel = getenv("LLILC_EH_ALL_METHODS");
    all_methods = sel != NULL && strcmp(sel, "1") == 0;
    if (getenv("LLILC_EH_EVENTS") != NULL)
        atexit(report_offered);
}

__attribute__((visibility("default"))) void *getJit(void) { return &compiler; }
