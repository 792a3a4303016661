// Regular expressions (the interpreter's backtracking with its own EH), an invalid pattern.
using System;
using System.Text.RegularExpressions;

class Rx {
  static int firstChance;
  static void Main() {
    AppDomain.CurrentDomain.FirstChanceException += (s, e) => firstChance++;
    var r = new Regex(@"(\w+)@(\w+)\.(com|org)");
    foreach (Match m in r.Matches("a@b.com, x@y.org and bad@z.net")) Console.WriteLine(m.Groups[1] + " at " + m.Groups[2]);
    Console.WriteLine(Regex.Replace("2020-01-02", @"(\d+)-(\d+)-(\d+)", "$3/$2/$1"));
    Console.WriteLine(string.Join("|", Regex.Split("a1b22c333d", @"\d+")));
    try { new Regex("(unclosed[", RegexOptions.None); } catch (ArgumentException e) { Console.WriteLine("invalid: " + e.GetType().Name); }
    try { Console.WriteLine("backtracked: " + Regex.Match(new string('a', 12) + "!", "(a+)+$", RegexOptions.None, TimeSpan.FromSeconds(600)).Success); }
    catch (RegexMatchTimeoutException) { Console.WriteLine("timeout"); }
    Console.WriteLine(Regex.IsMatch("Hello", "^h", RegexOptions.IgnoreCase) + " " + Regex.Escape("a.b*c"));
    Console.WriteLine("first-chance exceptions: " + firstChance);
  }
}
