"""The reader stage: a method's IL and its region tree become an LLVM module in LLVM's Windows
EH model (catchswitch/catchpad/cleanuppad funclets, the CoreCLR personality, outlined filters),
asking a metadata-backed JIT-EE interface (`jitee.JitEE`) every question about types, fields
and methods that the runtime would answer for a real JIT."""
