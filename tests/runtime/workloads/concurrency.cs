// Threads, tasks and lock; using and iterators with finally; async methods whose awaits sit in
// try/catch/finally; exceptions crossing framework frames (LINQ, Task, delegates) and ours.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

class Res : IDisposable {
  public static int Disposed; string name;
  public Res(string n) { name = n; }
  public void Dispose() { Interlocked.Increment(ref Disposed); }
}

class Concurrency {
  static int firstChance;
  static readonly object gate = new object();
  static int counter;
  static IEnumerable<int> Items(int n) {
    using (new Res("items")) { for (int i = 0; i < n; i++) { if (i == 7) throw new ArgumentException("seven"); yield return i; } }
  }
  static async Task<int> Step(int i) {
    await Task.Yield();
    if (i % 4 == 3) throw new InvalidOperationException("step " + i);
    return i * 2;
  }
  static async Task<string> Pipeline() {
    int total = 0; var log = new List<string>();
    for (int i = 0; i < 8; i++) {
      try { total += await Step(i); }
      catch (InvalidOperationException e) { log.Add(e.Message); await Task.Delay(1); }
      finally { total += 1; }
    }
    try { await Task.WhenAll(Step(3), Step(7), Step(2)); }
    catch (InvalidOperationException e) { log.Add("whenall " + e.Message); }
    return total + " " + string.Join(",", log);
  }
  static void Main() {
    AppDomain.CurrentDomain.FirstChanceException += (s, e) => Interlocked.Increment(ref firstChance);
    var threads = Enumerable.Range(0, 4).Select(k => new Thread(() => {
      for (int i = 0; i < 2000; i++) lock (gate) { counter++; }
    })).ToList();
    threads.ForEach(t => t.Start()); threads.ForEach(t => t.Join());
    Console.WriteLine("counter " + counter);
    var tasks = Enumerable.Range(0, 10).Select(i => Task.Run(() => { if (i == 5) throw new DivideByZeroException(); return i; })).ToArray();
    try { Task.WaitAll(tasks); } catch (AggregateException e) { Console.WriteLine("aggregate " + e.InnerExceptions.Count + " " + e.InnerException.GetType().Name); }
    Console.WriteLine(tasks.Where(t => t.Status == TaskStatus.RanToCompletion).Sum(t => t.Result));
    try { foreach (var x in Items(10)) Console.Write(x); } catch (ArgumentException e) { Console.WriteLine(" " + e.Message + " disposed " + Res.Disposed); }
    try { Items(10).Select(x => 10 / (x - 3)).ToList(); } catch (DivideByZeroException) { Console.WriteLine("crossed LINQ, disposed " + Res.Disposed); }
    Func<int, int> f = x => checked(x * int.MaxValue);
    try { new[] { 1, 2 }.Select(f).ToArray(); } catch (OverflowException) { Console.WriteLine("delegate overflow"); }
    Console.WriteLine(Pipeline().GetAwaiter().GetResult());
    using (var cts = new CancellationTokenSource()) {
      cts.Cancel();
      try { Task.Delay(1000, cts.Token).Wait(); } catch (AggregateException e) { Console.WriteLine(e.InnerException.GetType().Name); }
    }
    var pool = new SemaphoreSlim(2); int done = 0;
    Parallel.For(0, 20, i => { pool.Wait(); try { Interlocked.Add(ref done, i); } finally { pool.Release(); } });
    Console.WriteLine("parallel " + done);
    Console.WriteLine("first-chance exceptions: " + firstChance);
  }
}
