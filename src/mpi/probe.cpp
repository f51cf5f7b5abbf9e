// Probe matching: MPI_Probe/MPI_Iprobe and the matched probes on the user's message, with the
// messages of a header's size they had to receive held for the receives that follow.
#include "mpi/operations.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>

namespace hdsm::mpi {

std::deque<Held>& held() {
  static std::deque<Held> messages;
  return messages;
}

std::map<MPI_Message, Matched>& matched() {
  static std::map<MPI_Message, Matched> messages;
  return messages;
}

namespace {

/// A token: libmpi's handle of a zero-byte message this process sends itself on Wire::tokens.
int make_token(MPI_Message* token) {
  const MPI_Comm tokens = wire().tokens;
  if (tokens == MPI_COMM_NULL)
    return report("MPI_Improbe", MPI_ERR_OTHER, "MPI_Init has not run through hdsm_mpi");
  MPI_Request send = MPI_REQUEST_NULL;
  int rc = PMPI_Isend(nullptr, 0, MPI_BYTE, 0, 0, tokens, &send);
  if (rc != MPI_SUCCESS)
    return report("MPI_Improbe", rc, "sending a message handle's token to itself failed");
  rc = PMPI_Mprobe(0, 0, tokens, token, MPI_STATUS_IGNORE);  // the one just sent: tokens go out one at a time
  const int sent = PMPI_Wait(&send, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS) rc = sent;
  return rc != MPI_SUCCESS ? report("MPI_Improbe", rc, "matching a message handle's token failed")
                           : MPI_SUCCESS;
}

}  // namespace

int matched_probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  *flag = 0;
  Matched m;
  m.comm = comm;
  auto& waiting = held();
  const auto it = std::find_if(waiting.begin(), waiting.end(),
                               [&](const Held& h) { return h.matches(source, tag, comm); });
  if (it != waiting.end()) {
    m.payload = *it;
  } else {
    MPI_Status st;
    MPI_Message got = MPI_MESSAGE_NULL;
    int rc = PMPI_Improbe(source, tag, comm, flag, &got, &st);
    if (rc != MPI_SUCCESS || *flag == 0) return rc;
    *flag = 0;
    MPI_Count bytes = 0;
    PMPI_Get_elements_x(&st, MPI_BYTE, &bytes);
    if (static_cast<std::size_t>(bytes) != sizeof(Header)) {
      m.source = st.MPI_SOURCE;
      m.tag = st.MPI_TAG;
      m.bytes = bytes;
      matched()[got] = m;
      *message = got;
      *flag = 1;
      give_status(status, st);
      return MPI_SUCCESS;
    }
    Held h;
    h.comm = comm;
    h.source = st.MPI_SOURCE;
    h.tag = st.MPI_TAG;
    rc = receive_40(got, comm, h.header, h.chunked);
    if (rc != MPI_SUCCESS) return rc;
    m.payload = h;
  }
  MPI_Message token = MPI_MESSAGE_NULL;
  if (const int rc = make_token(&token); rc != MPI_SUCCESS) {
    if (it == waiting.end()) waiting.push_back(*m.payload);  // received: later receives still get it
    return rc;
  }
  if (it != waiting.end()) waiting.erase(it);
  m.source = m.payload->source;
  m.tag = m.payload->tag;
  m.bytes = m.payload->bytes();
  matched()[token] = m;
  *message = token;
  *flag = 1;
  set_status(status, m.source, m.tag, m.bytes);
  return MPI_SUCCESS;
}

int probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  *flag = 0;
  for (const Held& h : held()) {
    if (!h.matches(source, tag, comm)) continue;
    *flag = 1;
    set_status(status, h.source, h.tag, h.bytes());
    return MPI_SUCCESS;
  }
  MPI_Status st;
  int rc = PMPI_Iprobe(source, tag, comm, flag, &st);
  if (rc != MPI_SUCCESS || *flag == 0) return rc;
  MPI_Count bytes = 0;
  PMPI_Get_elements_x(&st, MPI_BYTE, &bytes);
  if (static_cast<std::size_t>(bytes) != sizeof(Header)) {
    give_status(status, st);
    return MPI_SUCCESS;
  }
  // The first message from that source with that tag is the one just probed (MPI keeps the order
  // of one sender's messages), so this receives exactly it.
  MPI_Message message = MPI_MESSAGE_NULL;
  rc = PMPI_Improbe(st.MPI_SOURCE, st.MPI_TAG, comm, flag, &message, &st);
  if (rc != MPI_SUCCESS || *flag == 0) return rc;  // not there: another thread received it meanwhile
  Held h;
  h.comm = comm;
  h.source = st.MPI_SOURCE;
  h.tag = st.MPI_TAG;
  rc = receive_40(message, comm, h.header, h.chunked);
  if (rc != MPI_SUCCESS) {
    *flag = 0;
    return rc;
  }
  held().push_back(h);
  set_status(status, h.source, h.tag, h.bytes());
  return MPI_SUCCESS;
}

}  // namespace hdsm::mpi
