// RyuJIT's side of tools/bench.py: time RuntimeHelpers.PrepareMethod on given methods.
//
// Usage (on the pinned CoreCLR 3.1, built by tools/bench.py with mcs):
//   dotnet ryujit_bench.exe ASSEMBLY TOKENS.txt
// ASSEMBLY is a path; System.Private.CoreLib is taken from the running runtime (it is the
// corpus' CoreLib: the corpus is that runtime's framework folder). TOKENS.txt holds one
// MethodDef token per line (hex, 0x06......): the EH methods llilc-eh compiles.
//
// Why PrepareMethod: in CoreCLR 3.1 it runs the method's prestub when it still points to it
// (ReflectionInvocation::PrepareMethod -> PrepareMethodHelper -> DoPrestub), i.e. exactly one
// JIT compilation of that method, whatever JIT settings the environment chose (ReadyToRun
// off, tiering off = full opt; tiering on with quick JIT for loops = tier 0). A method the
// runtime compiled before (startup) no longer points to its prestub and returns at once;
// the driver times a second call too, so the caller can tell those apart.
//
// Output, one line per token: token <TAB> status <TAB> first-call ticks <TAB> second-call
// ticks <TAB> Stopwatch.Frequency. status: ok, generic (a generic method or a method of a
// generic type: PrepareMethod needs an instantiation, llilc-eh compiles the definition),
// unresolved, or failed:<exception type>.
using System;
using System.Diagnostics;
using System.IO;
using System.Reflection;
using System.Runtime.CompilerServices;

static class RyuJitBench
{
    static int Main(string[] args)
    {
        if (args.Length != 2)
        {
            Console.Error.WriteLine("usage: ryujit_bench ASSEMBLY TOKENS.txt");
            return 1;
        }
        Assembly asm;
        if (Path.GetFileNameWithoutExtension(args[0]) == "System.Private.CoreLib")
            asm = typeof(object).Assembly;
        else
            asm = Assembly.LoadFrom(args[0]);
        Module module = asm.ManifestModule;
        string[] lines = File.ReadAllLines(args[1]);
        var output = new System.Text.StringBuilder();
        long frequency = Stopwatch.Frequency;
        foreach (string raw in lines)
        {
            string line = raw.Trim();
            if (line.Length == 0)
                continue;
            int token = Convert.ToInt32(line, 16);
            string status = "ok";
            long first = 0, second = 0;
            MethodBase method = null;
            try
            {
                method = module.ResolveMethod(token);
            }
            catch (Exception e)
            {
                status = "unresolved:" + e.GetType().Name;
            }
            if (method != null && (method.IsGenericMethodDefinition || method.DeclaringType.ContainsGenericParameters))
                status = "generic";
            else if (method != null)
            {
                try
                {
                    RuntimeMethodHandle handle = method.MethodHandle;
                    long t0 = Stopwatch.GetTimestamp();
                    RuntimeHelpers.PrepareMethod(handle);
                    long t1 = Stopwatch.GetTimestamp();
                    RuntimeHelpers.PrepareMethod(handle);
                    long t2 = Stopwatch.GetTimestamp();
                    first = t1 - t0;
                    second = t2 - t1;
                }
                catch (Exception e)
                {
                    status = "failed:" + e.GetType().Name;
                }
            }
            output.Append("0x").Append(token.ToString("X8")).Append('\t').Append(status).Append('\t')
                  .Append(first).Append('\t').Append(second).Append('\t').Append(frequency).Append('\n');
        }
        Console.Out.Write(output.ToString());
        return 0;
    }
}
