// Two threads against one lock: compiled into the synchronized-method programs
// (synchronized.cs, synchronized_plain.cs) beside their own source, so both race and probe
// the lock the same way. No EH here: llilc-eh is never asked for these.
using System.Threading;

static class Contention
{
    // can another thread take the lock now (within 5 s)? false while it is still held
    public static bool OtherThreadGets(object lockObject)
    {
        bool got = false;
        var t = new Thread(() =>
        {
            got = Monitor.TryEnter(lockObject, 5000);
            if (got) Monitor.Exit(lockObject);
        });
        t.Start();
        t.Join();
        return got;
    }

    // the same body on two threads at once, both joined
    public static void Race(ThreadStart body)
    {
        var a = new Thread(body);
        var b = new Thread(body);
        a.Start(); b.Start();
        a.Join(); b.Join();
    }
}
