// Implicit exceptions raised by checks and helpers, caught in the same method and across a call:
// null, divide by zero, INT_MIN / -1, checked overflow, array bounds, invalid cast, array store.
using System;

class Box { public int V; }

static class Implicit
{
    static int Div(int a, int b) { return a / b; }
    static int Rem(int a, int b) { return a % b; }

    static string Try(int which, int arg)
    {
        Box box = which == 0 ? null : new Box { V = arg };
        int[] arr = new int[3];
        object o = "a string";
        object[] objs = new string[2];
        try
        {
            switch (which)
            {
                case 0: return "V=" + box.V;
                case 1: return "div=" + (arg / (arg - arg));
                case 2: return "minval=" + Div(int.MinValue, arg);
                case 3: return "rem=" + Rem(int.MinValue, arg);
                case 4: checked { return "add=" + (int.MaxValue + arg); }
                case 5: checked { return "conv=" + (byte)(arg * 1000); }
                case 6: return "idx=" + arr[arg];
                case 7: return "cast=" + ((Box)o).V;
                case 8: objs[0] = new Box(); return "stored";
                case 9: long l = long.MinValue; checked { return "neg=" + (-l); }
                default: return "ok " + arg;
            }
        }
        catch (NullReferenceException) { return "NullReference"; }
        catch (DivideByZeroException) { return "DivideByZero"; }
        catch (OverflowException) { return "Overflow"; }
        catch (IndexOutOfRangeException) { return "IndexOutOfRange"; }
        catch (InvalidCastException) { return "InvalidCast"; }
        catch (ArrayTypeMismatchException) { return "ArrayTypeMismatch"; }
        finally { Console.Write("[" + which + "] "); }
    }

    static int Main()
    {
        for (int w = 0; w <= 10; w++) Console.WriteLine(Try(w, w == 2 || w == 3 ? -1 : w));
        return 0;
    }
}
