// Reflection invoke (TargetInvocationException around our exception) and file IO with a caught
// FileNotFoundException; using over streams.
using System;
using System.IO;
using System.Reflection;

class ReflectIo {
  static int firstChance;
  public static int Thrower(int x) { if (x > 0) throw new InvalidOperationException("x=" + x); return -x; }
  static void Main(string[] args) {
    AppDomain.CurrentDomain.FirstChanceException += (s, e) => firstChance++;
    var m = typeof(ReflectIo).GetMethod("Thrower");
    Console.WriteLine(m.Invoke(null, new object[] { -3 }));
    try { m.Invoke(null, new object[] { 4 }); }
    catch (TargetInvocationException e) { Console.WriteLine("TIE: " + e.InnerException.Message); }
    try { m.Invoke(null, new object[] { "s" }); } catch (ArgumentException e) { Console.WriteLine("arg: " + e.GetType().Name); }
    var t = Type.GetType("System.Text.StringBuilder");
    var sb = Activator.CreateInstance(t);
    t.GetMethod("Append", new[] { typeof(string) }).Invoke(sb, new object[] { "reflected" });
    Console.WriteLine(sb);
    string dir = Path.Combine(Path.GetTempPath(), "llilc-eh-wl-" + (args.Length > 0 ? args[0] : "x"));
    Directory.CreateDirectory(dir);
    string file = Path.Combine(dir, "data.txt");
    try {
      using (var w = new StreamWriter(file)) { for (int i = 0; i < 100; i++) w.WriteLine("line " + i); }
      using (var rd = new StreamReader(file)) { int n = 0; while (rd.ReadLine() != null) n++; Console.WriteLine("lines " + n); }
      Console.WriteLine(File.ReadAllText(file).Length + " " + new FileInfo(file).Length);
      try { File.ReadAllText(Path.Combine(dir, "missing.txt")); }
      catch (FileNotFoundException e) { Console.WriteLine("FNF " + Path.GetFileName(e.FileName)); }
      try { new FileStream(Path.Combine(dir, "nodir", "f"), FileMode.Open); }
      catch (DirectoryNotFoundException) { Console.WriteLine("DNF"); }
    } finally { Directory.Delete(dir, true); Console.WriteLine("cleaned " + Directory.Exists(dir)); }
    Console.WriteLine("first-chance exceptions: " + firstChance);
  }
}
