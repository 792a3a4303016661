// Calls into code shared between instantiations of generic structs over reference types
// (AsyncTaskMethodBuilder<string>, KeyValuePair<string,int>): `this` is a byref, so the shared
// code takes its class as a hidden argument. resolveToken names the shared method; we called
// its entry without the argument: SetResult crashed (SIGSEGV), get_Key threw (the catch ran).
// The installer now calls the instantiating stub embedGenericHandle names.
using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;

struct Holder { public AsyncTaskMethodBuilder<string> b; }

class Shared {
  static Task<string> S1() { var b = AsyncTaskMethodBuilder<string>.Create(); try { b.SetResult("ok1"); } catch (Exception) { } return b.Task; }
  static Task<string> S2() { var h = new Holder(); h.b = AsyncTaskMethodBuilder<string>.Create(); try { h.b.SetResult("ok2"); } catch (Exception) { } return h.b.Task; }
  static Task<int> I1() { var b = AsyncTaskMethodBuilder<int>.Create(); try { b.SetResult(5); } catch (Exception) { } return b.Task; }
  static string G1() { var t = new KeyValuePair<string, int>("kv", 1); try { return t.Key + t.ToString(); } catch (Exception) { return "caught"; } }
  static async Task<string> A1(int i) { try { await Task.Yield(); if (i > 1) throw new InvalidOperationException("a" + i); return "r" + i; } catch (InvalidOperationException e) { return e.Message; } finally { Console.Write("f" + i + " "); } }
  static void Main() {
    Console.WriteLine(I1().Result); Console.WriteLine(G1()); Console.WriteLine(S1().Result); Console.WriteLine(S2().Result);
    Console.WriteLine(A1(1).Result); Console.WriteLine(A1(2).Result);
  }
}
