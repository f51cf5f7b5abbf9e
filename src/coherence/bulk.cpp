// SharedSpace's bulk operations: memcpy, memmove, memset and I/O on shared objects (seed 000 §4.4).
// Each unit (a block, or the whole object under lazy-update) is handled on the side protocol.hpp's
// on_bulk_write / on_bulk_read choose; neighbouring units with the same side form one run, so a
// large operation costs a few calls, not one per block. Host-side work goes through the shadow view.
#include "coherence/shared_space.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hdsm::coherence {

namespace {

// The bounce buffer of copies between overlapping ranges.
constexpr std::size_t kBounceBytes = std::size_t{1} << 20;

[[noreturn]] void freed_during(const char* call) {
  throw InvalidArgument(
      fmt::format("{}: a shared object of the range was freed while the operation ran", call));
}

}  // namespace

SharedSpace::Source SharedSpace::Source::advanced(std::size_t n) const {
  Source s = *this;
  if (kind == Kind::host) s.host += n;
  if (kind == Kind::device) s.offset += n;
  return s;
}

std::vector<SharedSpace::Span> SharedSpace::spans(const void* p, std::size_t n, const char* call) const {
  if (n > UINTPTR_MAX - reinterpret_cast<std::uintptr_t>(p))
    throw InvalidArgument(fmt::format("{}: the range of {} at {} wraps around", call, format_bytes(n), p));
  std::vector<Span> out;
  const auto* begin = static_cast<const std::byte*>(p);
  for (std::size_t done = 0; done < n;) {
    const std::byte* q = begin + done;
    const Directory::Hit hit = directory_.lookup(q);
    std::shared_ptr<Entry> e = hit.object != nullptr ? entry_of(hit.object->id) : nullptr;
    if (e == nullptr)
      throw InvalidArgument(
          fmt::format("{}: byte {} of the {} range at {} is not in a live shared object: {}", call, done,
                      format_bytes(n), p, directory_.describe(q)));
    const std::size_t bytes = std::min(n - done, hit.object->bytes - hit.offset_in_object);
    out.push_back({std::move(e), hit.offset_in_object, bytes});
    done += bytes;
  }
  return out;
}

std::vector<SharedSpace::BulkRun> SharedSpace::read_runs(const Entry& e, std::size_t offset,
                                                         std::size_t bytes) const {
  const Object& o = *e.object;
  const std::size_t block = directory_.block_bytes();
  std::vector<BulkRun> runs;
  for (std::size_t at = offset, end = offset + bytes; at < end;) {
    const std::size_t next = std::min(end, (at / block + 1) * block);
    const Side side = on_bulk_read(o.states[at / block]);
    if (!runs.empty() && runs.back().side == side)
      runs.back().bytes += next - at;
    else
      runs.push_back({at, next - at, side});
    at = next;
  }
  return runs;
}

transfer::CopyEnd SharedSpace::device_range(const Entry& e, std::size_t offset) const {
  return transfer::CopyEnd::device_memory(*devices_[e.device], e.buffer, offset, *queues_[e.device]);
}

Event SharedSpace::move(const transfer::CopyEnd& dst, const transfer::CopyEnd& src, std::size_t n,
                        bool order_after) {
  transfer::CopyEngine::Started s = engine_->start(dst, src, n, order_after);
  counters_.action(Action::bulk).add(s.plan.link_bytes());
  return std::move(s.done);
}

void SharedSpace::write_span(const Span& span, const Source& source, std::vector<Event>* pending) {
  Entry& e = *span.entry;
  std::lock_guard lock(e.mutex);
  if (!e.live) freed_during("bulk write");
  e.pending.wait();  // an upload in flight still reads the shadow view
  settle(e, span.offset, span.bytes, true);
  Object& o = *e.object;
  const std::size_t block = directory_.block_bytes();
  const bool lazy = kind_ == ProtocolKind::lazy;

  // Decide every unit first: states and protections change before any data moves, so a thread that
  // reads a block this operation makes invalid faults and waits for this lock.
  std::vector<BulkRun> runs;
  struct {
    std::size_t first = 0, end = 0;
    Protection protection = Protection::none;
  } change;  // consecutive blocks whose protection changes, applied in one call
  const auto apply = [&] {
    if (change.end > change.first)
      e.protection->set(change.first, change.end - change.first, change.protection);
    change.first = change.end = 0;
  };
  for (std::size_t at = span.offset, end = span.offset + span.bytes; at < end;) {
    const std::size_t unit_begin = lazy ? 0 : at / block * block;
    const std::size_t unit_end = lazy ? o.bytes : std::min(o.bytes, unit_begin + block);
    const std::size_t next = std::min(end, unit_end);
    const std::size_t first_block = unit_begin / block, end_block = (unit_end + block - 1) / block;
    const BlockState state = o.states[first_block];
    const BulkStep step = on_bulk_write(kind_, state, at == unit_begin && next == unit_end);
    if (step.next != state) {
      std::fill(o.states.begin() + static_cast<std::ptrdiff_t>(first_block),
                o.states.begin() + static_cast<std::ptrdiff_t>(end_block), step.next);
      const Protection p = protection_of(kind_, step.next);
      if (change.end != first_block || change.protection != p) {
        apply();
        change = {first_block, first_block, p};
      }
      change.end = end_block;
    }
    if (!runs.empty() && runs.back().side == step.side)
      runs.back().bytes += next - at;
    else
      runs.push_back({at, next - at, step.side});
    at = next;
  }
  apply();

  std::byte* const shadow = arena_.shadow(o.segment, o.offset);
  Queue& queue = *queues_[e.device];
  std::vector<Event> moves;  // device work of this span that the copy engine started
  bool device_work = false;
  for (const BulkRun& r : runs) {
    const Source src = source.advanced(r.offset - span.offset);
    std::byte* const host = shadow + r.offset;
    if (r.side != Side::device) {
      switch (src.kind) {
        case Source::Kind::value:
          std::memset(host, src.value, r.bytes);
          break;
        case Source::Kind::host:
          std::memmove(host, src.host, r.bytes);  // the source may be this object's own shadow
          break;
        case Source::Kind::device:
          move(transfer::CopyEnd::host_memory(host), device_range(*src.entry, src.offset), r.bytes, false)
              .wait();
          break;
      }
    }
    if (r.side == Side::host) continue;
    device_work = true;
    if (src.kind == Source::Kind::value) {
      queue.fill(e.buffer, r.offset, r.bytes, src.value);
      continue;
    }
    // Both sides: the host copy holds the data now, whatever its source was.
    const transfer::CopyEnd from =
        r.side == Side::both || src.kind == Source::Kind::host
            ? transfer::CopyEnd::host_memory(r.side == Side::both ? host : src.host)
            : device_range(*src.entry, src.offset);
    moves.push_back(move(device_range(e, r.offset), from, r.bytes, false));
  }
  if (!device_work) return;
  moves.push_back(queue.record());  // the fills, and what the engine ran on this queue
  Event done = transfer::all_of(std::move(moves));
  if (pending == nullptr) return done.wait();
  e.pending = done;  // a "both" run uploads from the shadow view, which writers must not change yet
  note_copy(e, span.offset, span.bytes, true, done);  // later work on these bytes follows it
  pending->push_back(std::move(done));
}

void SharedSpace::write_spans(const std::vector<Span>& dst, std::size_t at, std::size_t n,
                              const Source& source, std::vector<Event>* pending) {
  std::size_t span_begin = 0;
  for (const Span& span : dst) {
    const std::size_t span_end = span_begin + span.bytes;
    const std::size_t lo = std::max(at, span_begin), hi = std::min(at + n, span_end);
    if (lo < hi)
      write_span({span.entry, span.offset + (lo - span_begin), hi - lo}, source.advanced(lo - at), pending);
    span_begin = span_end;
    if (span_begin >= at + n) break;
  }
}

void SharedSpace::write(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) {
  if (n == 0) return;
  const std::vector<Span> dst_spans = spans(dst, n, "write to shared memory");
  write_spans(dst_spans, 0, n, Source{.kind = Source::Kind::host, .host = static_cast<const std::byte*>(src)},
              pending);
}

void SharedSpace::fill(void* dst, std::uint8_t value, std::size_t n) {
  if (n == 0) return;
  const std::vector<Span> dst_spans = spans(dst, n, "fill of shared memory");
  write_spans(dst_spans, 0, n, Source{.kind = Source::Kind::value, .value = value});
}

void SharedSpace::read(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) {
  if (n == 0) return;
  auto* out = static_cast<std::byte*>(dst);
  for (const Span& span : spans(src, n, "read from shared memory")) {
    Entry& e = *span.entry;
    {
      std::lock_guard lock(e.mutex);
      if (!e.live) freed_during("bulk read");
      settle(e, span.offset, span.bytes, false);
      const Object& o = *e.object;
      const std::byte* const shadow = arena_.shadow(o.segment, o.offset);
      std::vector<Event> moves;
      for (const BulkRun& r : read_runs(e, span.offset, span.bytes)) {
        std::byte* const to = out + (r.offset - span.offset);
        if (r.side == Side::host) {
          std::memcpy(to, shadow + r.offset, r.bytes);
          continue;
        }
        moves.push_back(move(transfer::CopyEnd::host_memory(to), device_range(e, r.offset), r.bytes, false));
      }
      Event done = transfer::all_of(std::move(moves));
      if (pending == nullptr) {
        done.wait();
      } else if (done.state() != nullptr) {
        note_copy(e, span.offset, span.bytes, false, done);  // later writes of these bytes follow it
        pending->push_back(std::move(done));
      }
    }
    out += span.bytes;
  }
}

void SharedSpace::copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) {
  if (n == 0 || dst == src) return;
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  const std::vector<Span> dst_spans = spans(dst, n, "copy to shared memory");
  const std::vector<Span> src_spans = spans(src, n, "copy from shared memory");
  if (d < s + n && s < d + n)
    return copy_overlapping(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
  std::size_t at = 0;
  for (const Span& span : src_spans) {
    // Decide under the source's lock, copy under the destination's: never both locks at once, so two
    // threads copying between the same objects in opposite directions cannot deadlock.
    std::vector<BulkRun> runs;
    const std::byte* shadow = nullptr;
    {
      std::lock_guard lock(span.entry->mutex);
      if (!span.entry->live) freed_during("bulk copy");
      settle(*span.entry, span.offset, span.bytes, false);
      runs = read_runs(*span.entry, span.offset, span.bytes);
      shadow = arena_.shadow(span.entry->object->segment, span.entry->object->offset);
    }
    const std::size_t before = pending != nullptr ? pending->size() : 0;
    for (const BulkRun& r : runs) {
      const Source source =
          r.side == Side::host
              ? Source{.kind = Source::Kind::host, .host = shadow + r.offset}
              : Source{.kind = Source::Kind::device, .entry = span.entry.get(), .offset = r.offset};
      write_spans(dst_spans, at + (r.offset - span.offset), r.bytes, source, pending);
    }
    if (pending != nullptr && pending->size() > before) {
      // The device copy of the source may still be read: later writes of these bytes follow it.
      std::lock_guard lock(span.entry->mutex);
      for (std::size_t i = before; i < pending->size(); ++i)
        note_copy(*span.entry, span.offset, span.bytes, false, (*pending)[i]);
    }
    at += span.bytes;
  }
}

void SharedSpace::copy_overlapping(std::byte* dst, const std::byte* src, std::size_t n) {
  // Chunk by chunk through the host, upwards when the destination is below the source and
  // downwards otherwise, so no chunk is read after a write overlapped it.
  std::vector<std::byte> bounce(std::min(n, kBounceBytes));
  const bool down = dst > src;
  for (std::size_t done = 0; done < n;) {
    const std::size_t c = std::min(n - done, bounce.size());
    const std::size_t at = down ? n - done - c : done;
    read(bounce.data(), src + at, c);
    write(dst + at, bounce.data(), c);
    done += c;
  }
}

}  // namespace hdsm::coherence
