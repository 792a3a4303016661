// Exceptions at known counts, for `llilc-eh run`'s exception counting (runtime/events.py):
// Counts.Ours's methods are the ones a test compiles with llilc-eh (--methods 'Counts.Ours::*'),
// Counts.Control's and Main stay RyuJIT's. What runs, per call of Ours.Run():
//   5 x  throw ArgumentException in Ours.Run, caught there               thrown in ours 5, catch 5
//   4 x  Control.Throw (RyuJIT, no EH) throws; Ours.Run's finally runs (calling Control.Finally),
//        its filter says yes and its catch runs                            filter 4, finally 4, catch 4
//   2 x  throw FormatException in Ours.Run, caught and rethrown there,
//        caught again there                                                thrown in ours 2 + 2 rethrown, catch 4
// and per call of Control.CatchOurs():
//   3 x  Ours.Thrower (ours, no EH) throws, Control.CatchOurs catches      thrown in ours 3, catch in RyuJIT's 3
using System;

namespace Counts
{
    static class Ours
    {
        public static int Run()
        {
            int c = 0;
            for (int i = 0; i < 5; i++) {
                try { throw new ArgumentException("a" + i); }
                catch (ArgumentException) { c += 1; }
            }
            for (int i = 0; i < 4; i++) {
                try {
                    try { Control.Throw(i); }
                    finally { Control.Finally(); }
                }
                catch (InvalidOperationException e) when (Control.Keep(e)) { c += 10; }
            }
            for (int i = 0; i < 2; i++) {
                try {
                    try { throw new FormatException("f" + i); }
                    catch (FormatException) { c += 1000; throw; }
                }
                catch (FormatException) { c += 1000; }
            }
            return c;
        }

        public static void Thrower(int i)
        {
            throw new NotSupportedException("n" + i);
        }
    }

    static class Control
    {
        public static void Throw(int i)
        {
            throw new InvalidOperationException("i" + i);
        }

        public static int finallys;

        // not inlined into the finally (a call to another method): LLVM may drop a cleanup whose
        // only effect is on a local dead once the frame unwinds -- measured at O2 -- but not this
        public static void Finally()
        {
            finallys++;
        }

        public static bool Keep(Exception e)
        {
            return e.Message.StartsWith("i");
        }

        public static int CatchOurs()
        {
            int c = 0;
            for (int i = 0; i < 3; i++) {
                try { Ours.Thrower(i); }
                catch (NotSupportedException) { c++; }
            }
            return c;
        }
    }

    static class Program
    {
        static int Main()
        {
            Console.WriteLine("Ours.Run: " + Ours.Run() + ", finallys: " + Control.finallys);
            Console.WriteLine("Control.CatchOurs: " + Control.CatchOurs());
            return 0;
        }
    }
}
