// `llilc-eh run` passes the program's arguments, output streams and exit code through untouched:
// Main (EH: compiled by llilc-eh) prints its arguments, writes to stderr in a finally and
// returns the first argument as its exit code (99 when there is none: the catch ran).
using System;

static class ExitArgs
{
    static int Main(string[] args)
    {
        int code = 0;
        try
        {
            foreach (string a in args) Console.WriteLine("arg " + a);
            code = int.Parse(args[0]);
        }
        catch (IndexOutOfRangeException e) { Console.WriteLine("caught " + e.GetType().Name); code = 99; }
        finally { Console.Error.WriteLine("finally to stderr"); }
        return code;
    }
}
