// String formatting and parsing: FormatException / OverflowException thrown inside the framework
// and caught there (TryParse paths) or in our frames; encodings with a throwing decoder.
using System;
using System.Globalization;
using System.Text;

class Parsing {
  static int firstChance;
  static string TryInt(string s) {
    try { return int.Parse(s, CultureInfo.InvariantCulture).ToString(); }
    catch (FormatException) { return "format"; }
    catch (OverflowException) { return "overflow"; }
    finally { Console.Write("[" + s + "] "); }
  }
  static void Main() {
    AppDomain.CurrentDomain.FirstChanceException += (s, e) => firstChance++;
    foreach (var s in new[] { "12", "-7", "x1", "99999999999", "", " 5 " }) Console.WriteLine(TryInt(s));
    Console.WriteLine(int.TryParse("abc", out var v) + " " + v + " " + long.TryParse("123456789012", out var l) + " " + l);
    try { Convert.ToByte("300"); } catch (OverflowException e) { Console.WriteLine("byte " + e.GetType().Name); }
    try { checked { int big = int.MaxValue; big += int.Parse("1"); } } catch (OverflowException) { Console.WriteLine("checked"); }
    try { decimal.Parse("1.2.3", CultureInfo.InvariantCulture); } catch (FormatException) { Console.WriteLine("decimal"); }
    try { Guid.Parse("not-a-guid"); } catch (FormatException) { Console.WriteLine("guid"); }
    try { DateTime.ParseExact("2020-13-01", "yyyy-MM-dd", CultureInfo.InvariantCulture); } catch (FormatException) { Console.WriteLine("date"); }
    try { string.Format("{0} {1}", 1); } catch (FormatException) { Console.WriteLine("format string"); }
    Console.WriteLine(string.Format(CultureInfo.InvariantCulture, "{0:N2} {1:X8} {2:E3} {3,-5}| {4:P1}", 1234567.891, 48879, 0.000123, "ab", 0.256));
    Console.WriteLine(double.Parse("3.25e2", CultureInfo.InvariantCulture) + " " + 1.5.ToString("F3", CultureInfo.InvariantCulture));
    var strict = Encoding.GetEncoding("utf-8", EncoderFallback.ExceptionFallback, DecoderFallback.ExceptionFallback);
    try { strict.GetString(new byte[] { 0x41, 0xC3, 0x28, 0x42 }); }
    catch (DecoderFallbackException e) { Console.WriteLine("decoder at " + e.Index); }
    try { Encoding.ASCII.Clone(); var a = (Encoding)Encoding.ASCII.Clone(); a.EncoderFallback = EncoderFallback.ExceptionFallback; a.GetBytes("caf\u00e9"); }
    catch (EncoderFallbackException e) { Console.WriteLine("encoder " + (int)e.CharUnknown); }
    Console.WriteLine(Encoding.UTF8.GetString(Encoding.UTF8.GetBytes("h\u00e9llo \u20ac")) + " " + Convert.ToBase64String(Encoding.Unicode.GetBytes("ab")));
    Console.WriteLine("first-chance exceptions: " + firstChance);
  }
}
