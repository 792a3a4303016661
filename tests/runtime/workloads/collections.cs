// Collections and LINQ, Dictionary/HashSet growth, StringBuilder: the framework's iterators
// (finally-bearing MoveNext/Dispose), enumerators under `using`, growth paths.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Text;

class Collections {
  static int firstChance;
  static IEnumerable<int> Squares(int n) {
    try { for (int i = 0; i < n; i++) yield return i * i; }
    finally { Console.WriteLine("squares done"); }
  }
  static void Main() {
    AppDomain.CurrentDomain.FirstChanceException += (s, e) => firstChance++;
    var list = new List<int>();
    for (int i = 0; i < 1000; i++) list.Add((i * 7919) % 1009);
    Console.WriteLine(string.Join(",", list.Where(x => x % 3 == 0).OrderBy(x => x).Take(10)));
    Console.WriteLine(list.Sum() + " " + list.Max() + " " + list.Distinct().Count());
    var groups = list.GroupBy(x => x % 10).OrderBy(g => g.Key).Select(g => g.Key + ":" + g.Count());
    Console.WriteLine(string.Join(" ", groups));
    var dict = new Dictionary<string, int>();
    for (int i = 0; i < 5000; i++) dict["k" + i] = i;
    Console.WriteLine(dict.Count + " " + dict["k4999"] + " " + dict.ContainsKey("k5000"));
    var set = new HashSet<long>();
    for (long i = 0; i < 20000; i += 3) set.Add(i * i);
    Console.WriteLine(set.Count + " " + set.Contains(9L * 9 * 9 * 9));
    try { var x = dict["missing"]; } catch (KeyNotFoundException e) { Console.WriteLine("KNF " + e.GetType().Name); }
    try { list.First(x => x < 0); } catch (InvalidOperationException e) { Console.WriteLine("IOE " + e.Message); }
    var sb = new StringBuilder();
    for (int i = 0; i < 2000; i++) sb.Append(i % 10).Append(i % 7 == 0 ? "," : "");
    sb.Insert(0, "start:").Replace("123", "<>").AppendFormat("{0:D5}|{1,6}|", 42, "r");
    Console.WriteLine(sb.Length + " " + sb.ToString(0, 40) + " " + sb.ToString().GetHashCode() % 1 );
    Console.WriteLine(Squares(5).Sum());
    foreach (var q in Squares(10)) { if (q > 10) break; }
    var sorted = new SortedDictionary<int, string>();
    for (int i = 20; i > 0; i--) sorted[i] = i.ToString("X");
    Console.WriteLine(string.Concat(sorted.Values));
    var linked = new LinkedList<int>(Enumerable.Range(0, 100));
    Console.WriteLine(linked.First.Value + linked.Last.Value);
    Console.WriteLine("first-chance exceptions: " + firstChance);
  }
}
