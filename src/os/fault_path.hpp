// Marks the functions a fault handler runs when it resolves a write fault itself.
//
// The handler's mprotect makes the kernel flush the TLB, so every page the handler touches after
// it, and every page the next fault's handler touches, costs a page walk (about 90 cycles in a
// virtual machine with nested paging; docs/benchmarks.md). GCC puts hot functions in .text.hot,
// which the linker keeps together: the handler's code then sits on one or two pages instead of
// five spread over the library.
#pragma once

#define HDSM_FAULT_PATH [[gnu::hot]]
