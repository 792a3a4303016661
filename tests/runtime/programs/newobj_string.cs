// newobj on System.String and on a multi-dimensional array: CoreCLR allocates neither before a
// constructor runs. A string's constructor is called with a null `this` and returns the string
// (CORINFO_FLG_VAROBJSIZE); allocated with NEWSFAST and passed as `this` it crashed (SIGSEGV),
// and CoreLib's AppContext.Setup -- `new string(char*)` -- stopped the runtime's start-up.
// A multi-dimensional array is CORINFO_HELP_NEW_MDARR_NONVARARG's: declined by name, not run.
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
  static unsafe void Main() {
    char* buf = stackalloc char[4]; buf[0] = 'h'; buf[1] = 'i'; buf[2] = '\0';
    Console.WriteLine(Make(buf, 3));
    Console.WriteLine(Bad(-1));
    Console.WriteLine(Grid(4));
  }
}
