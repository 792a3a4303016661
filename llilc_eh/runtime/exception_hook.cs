// llilc-eh run's startup hook (DOTNET_STARTUP_HOOKS, .NET Core 3.0+): it holds the program
// until the driver's EventPipe session is on, counts every first-chance exception in process,
// and at exit holds the process again until the driver has stopped the session -- stopping it
// is what flushes every thread's buffered events (runtime/events.py says why it must be so).
//
// It talks to the driver over two inherited pipes (LLILC_EH_HOOK_FDS="READ,WRITE"): a 9-byte
// message to the driver -- 'S' (started, count 0), 'X' (ProcessExit) or 'U' (an unhandled
// exception: the process is about to die without shutting the runtime down, so the driver
// stops the session itself), then the count as a little-endian int64 -- and one byte back
// ('1' the session is on / was read to its end, '0' it is not) before it goes on. It uses libc read/write through blittable P/Invokes and no try/catch of its own,
// so it neither throws nor adds a method with EH to the run; with the variable unset it does
// nothing.
using System;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;

internal static class StartupHook
{
    static long firstChance;      // AppDomain.FirstChanceException, every thread
    static int toDriver = -1, fromDriver = -1;

    [DllImport("libc.so.6", EntryPoint = "read")]
    static extern unsafe IntPtr Read(int fd, byte* buffer, IntPtr count);

    [DllImport("libc.so.6", EntryPoint = "write")]
    static extern unsafe IntPtr Write(int fd, byte* buffer, IntPtr count);

    public static void Initialize()
    {
        string fds = Environment.GetEnvironmentVariable("LLILC_EH_HOOK_FDS");
        if (fds == null)
            return;
        int comma = fds.IndexOf(',');
        if (comma <= 0)
            return;
        fromDriver = Number(fds, 0, comma);
        toDriver = Number(fds, comma + 1, fds.Length);
        if (fromDriver < 0 || toDriver < 0)
            return;
        AppDomain.CurrentDomain.FirstChanceException += OnFirstChance;
        AppDomain.CurrentDomain.ProcessExit += OnExit;
        AppDomain.CurrentDomain.UnhandledException += OnUnhandled;
        Exchange((byte)'S', 0);
    }

    static int Number(string s, int from, int to)
    {
        int n = 0;
        if (from >= to)
            return -1;
        for (int i = from; i < to; i++) {
            char c = s[i];
            if (c < '0' || c > '9')
                return -1;
            n = n * 10 + (c - '0');
        }
        return n;
    }

    static void OnFirstChance(object sender, FirstChanceExceptionEventArgs e)
    {
        Interlocked.Increment(ref firstChance);
    }

    static void OnExit(object sender, EventArgs e)
    {
        Exchange((byte)'X', Interlocked.Read(ref firstChance));
    }

    static void OnUnhandled(object sender, UnhandledExceptionEventArgs e)
    {
        Exchange((byte)'U', Interlocked.Read(ref firstChance));
    }

    // Send the message, then wait for the driver's one byte (or the pipe's end: driver gone).
    static unsafe void Exchange(byte kind, long count)
    {
        byte* message = stackalloc byte[9];
        message[0] = kind;
        for (int i = 0; i < 8; i++)
            message[1 + i] = (byte)(count >> (8 * i));
        int sent = 0, tries = 0;
        while (sent < 9 && tries++ < 1000) {     // -1: interrupted by a signal, try again
            long n = (long)Write(toDriver, message + sent, (IntPtr)(9 - sent));
            if (n > 0)
                sent += (int)n;
        }
        byte reply;
        for (tries = 0; tries < 1000; tries++)     // 1: the reply, 0: the driver is gone
            if ((long)Read(fromDriver, &reply, (IntPtr)1) >= 0)
                break;
    }
}
