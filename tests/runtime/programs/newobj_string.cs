// newobj on System.String and on a multi-dimensional array: CoreCLR allocates neither before a
// constructor runs. A string's constructor is called with a null `this` and returns the string
// (CORINFO_FLG_VAROBJSIZE); allocated with NEWSFAST and passed as `this` it crashed (SIGSEGV),
// and CoreLib's AppContext.Setup -- `new string(char*)` -- stopped the runtime's start-up.
// A multi-dimensional array is allocated by CORINFO_HELP_NEW_MDARR_NONVARARG (its `.ctor` threw
// InvalidProgramException when called): ranks 2 and 3, lower bounds, reference elements, and a
// negative length (OverflowException from the helper, caught).
using System;

class Strings {
  static unsafe string Make(char* p, int n) {
    try { return new string('x', n) + new string(p) + new string(new char[] {'a', 'b'}) + new string(p, 0, 1); }
    catch (ArgumentException) { return "arg"; }
  }
  static string Bad(int n) {
    try { return new string('y', n); }
    catch (ArgumentOutOfRangeException e) { return "caught " + e.GetType().Name; }
  }
  static int Grid(int n) {
    try { var g = new int[n, 3]; g[1, 2] = 5; return g[1, 2] + g.GetLength(0); }
    catch (OutOfMemoryException) { return -1; }
  }
  static string Cube(int n) {
    try {
      var c = new string[n, 2, 3]; c[n - 1, 1, 2] = "corner";
      var b = (int[,])Array.CreateInstance(typeof(int), new[] { 2, 2 }, new[] { 5, -1 });
      var d = new long[n, n]; d[n - 1, 0] = 7;
      Console.WriteLine(c[n - 1, 1, 2] + " " + c.Rank + " " + c.Length + " " + b.GetLowerBound(0) + " " + d[n - 1, 0]);
      return "no overflow " + new int[-n, 1].Length;
    }
    catch (OverflowException e) { return "overflow " + e.GetType().Name; }
  }
  static unsafe void Main() {
    char* buf = stackalloc char[4]; buf[0] = 'h'; buf[1] = 'i'; buf[2] = '\0';
    Console.WriteLine(Make(buf, 3));
    Console.WriteLine(Bad(-1));
    Console.WriteLine(Grid(4));
    Console.WriteLine(Cube(3));
  }
}
