/* Symbol visibility: libhdsm is built with hidden symbols by default, and exports what its public
 * headers declare (each wraps its declarations in HDSM_VISIBLE_BEGIN/END) and the few internal
 * interfaces its own libraries, tools and tests reach (marked likewise in src/). C and C++. */
#ifndef HDSM_EXPORT_H
#define HDSM_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define HDSM_API __attribute__((visibility("default")))
#define HDSM_VISIBLE_BEGIN _Pragma("GCC visibility push(default)")
#define HDSM_VISIBLE_END _Pragma("GCC visibility pop")
#else
#define HDSM_API
#define HDSM_VISIBLE_BEGIN
#define HDSM_VISIBLE_END
#endif

#endif
