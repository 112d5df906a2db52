#include "turbokv/client/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace turbokv::client {

uint64_t RendezvousWeight(absl::string_view node_id, absl::string_view block_hash) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const char zero = 0;
  const bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx.get(), node_id.data(), node_id.size()) == 1 &&
                  EVP_DigestUpdate(ctx.get(), &zero, 1) == 1 &&
                  EVP_DigestUpdate(ctx.get(), block_hash.data(), block_hash.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx.get(), digest, &len) == 1;
  // A failing libcrypto is a broken installation no caller can handle.
  if (!ok || len != 32) std::abort();
  uint64_t w = 0;
  for (int i = 0; i < 8; ++i) w = (w << 8) | digest[i];
  return w;
}

std::vector<size_t> RendezvousRank(absl::Span<const std::string> node_ids,
                                   absl::string_view block_hash) {
  std::vector<std::pair<uint64_t, size_t>> w(node_ids.size());
  for (size_t i = 0; i < node_ids.size(); ++i) {
    w[i] = {RendezvousWeight(node_ids[i], block_hash), i};
  }
  std::sort(w.begin(), w.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return node_ids[a.second] < node_ids[b.second];  // std::string compares bytewise
  });
  std::vector<size_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i].second;
  return out;
}

std::vector<size_t> RendezvousOwners(absl::Span<const std::string> node_ids,
                                     absl::string_view block_hash, int replicas) {
  std::vector<size_t> rank = RendezvousRank(node_ids, block_hash);
  rank.resize(std::min(rank.size(), static_cast<size_t>(std::max(replicas, 1))));
  return rank;
}

size_t TuningNode(absl::Span<const std::string> node_ids) {
  if (node_ids.empty()) return 0;
  return RendezvousRank(node_ids, kTuningKey)[0];
}

absl::Status ValidateSegmentBlocks(int segment_blocks) {
  if (segment_blocks < 1 || segment_blocks > kMaxSegmentBlocks) {
    return absl::InvalidArgumentError(absl::StrCat("segment_blocks must be in [1, ",
                                                   kMaxSegmentBlocks, "], got ", segment_blocks));
  }
  return absl::OkStatus();
}

absl::StatusOr<ChainContext> MakeChainContext(absl::Span<const std::string> chain, size_t start,
                                              int segment_blocks) {
  if (absl::Status st = ValidateSegmentBlocks(segment_blocks); !st.ok()) return st;
  if (start > chain.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("start must be in [0, chain size ", chain.size(), "], got ", start));
  }
  ChainContext c;
  c.position = start;
  const size_t head = start - start % static_cast<size_t>(segment_blocks);
  if (head < start) c.segment_head = chain[head];
  return c;
}

absl::StatusOr<std::vector<absl::string_view>> PlacementKeys(absl::Span<const std::string> hashes,
                                                             int segment_blocks,
                                                             const ChainContext& chain) {
  if (absl::Status st = ValidateSegmentBlocks(segment_blocks); !st.ok()) return st;
  const auto s = static_cast<uint64_t>(segment_blocks);
  const uint64_t lead = chain.position % s;  // blocks of hashes[0]'s segment before hashes[0]
  if (lead != 0 && !hashes.empty() && chain.segment_head.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chain.segment_head is required: hashes[0] sits at chain position ", chain.position,
        ", inside the segment that starts at position ", chain.position - lead,
        " (segment_blocks=", segment_blocks, "); build the context with MakeChainContext"));
  }
  std::vector<absl::string_view> out;
  out.reserve(hashes.size());
  for (uint64_t j = 0; j < hashes.size(); ++j) {
    // Index of block j counted from the start of hashes[0]'s segment.
    const uint64_t k = j + lead;
    if (k < s && lead != 0) {
      out.emplace_back(chain.segment_head);
    } else {
      out.emplace_back(hashes[k - k % s - lead]);
    }
  }
  return out;
}

std::string FormatHostPort(absl::string_view host, uint16_t port) {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

std::string Endpoint::Spec() const {
  return absl::StrCat(dns ? "dns:///" : "", FormatHostPort(host, port));
}

absl::StatusOr<std::vector<Endpoint>> ParseEndpoints(absl::string_view spec) {
  std::vector<Endpoint> out;
  for (absl::string_view raw : absl::StrSplit(spec, ',')) {
    absl::string_view item = absl::StripAsciiWhitespace(raw);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("endpoint \"", raw, "\": ", why));
    };
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("empty endpoint in \"", spec, "\""));
    }
    Endpoint ep;
    if (absl::ConsumePrefix(&item, "dns:///")) {
      ep.dns = true;
    } else if (absl::StartsWith(item, "dns:")) {
      return bad("only dns:///NAME:PORT (no authority) is supported");
    }
    absl::string_view host, port;
    if (absl::StartsWith(item, "[")) {
      const size_t end = item.find(']');
      if (end == absl::string_view::npos || item.substr(end + 1, 1) != ":") {
        return bad("expected [IPv6]:PORT");
      }
      host = item.substr(1, end - 1);
      port = item.substr(end + 2);
    } else {
      const size_t colon = item.rfind(':');
      if (colon == absl::string_view::npos ||
          item.substr(0, colon).find(':') != absl::string_view::npos) {
        return bad("expected HOST:PORT");
      }
      host = item.substr(0, colon);
      port = item.substr(colon + 1);
    }
    uint32_t p = 0;
    if (host.empty()) return bad("empty host");
    if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(port, &p) || p == 0 || p > 65535) {
      return bad("port must be in [1, 65535]");
    }
    ep.host = std::string(host);
    ep.port = static_cast<uint16_t>(p);
    for (const Endpoint& e : out) {
      if (e.host == ep.host && e.port == ep.port && e.dns == ep.dns) return bad("listed twice");
    }
    out.push_back(std::move(ep));
  }
  return out;
}

namespace {

// The A/AAAA addresses of `name` as ip:port node ids, IPv4 first, each family sorted.
absl::StatusOr<std::vector<std::string>> ResolveName(const Endpoint& ep) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(ep.host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve \"", ep.host, "\": ", gai_strerror(rc)));
  }
  std::set<std::pair<int, std::string>> v4,
      v6;  // (family, packed address) sorts by address
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      v4.insert({AF_INET, std::string(reinterpret_cast<const char*>(&sin->sin_addr), 4)});
    } else if (a->ai_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      v6.insert({AF_INET6, std::string(reinterpret_cast<const char*>(&sin6->sin6_addr), 16)});
    }
  }
  freeaddrinfo(res);
  std::vector<std::string> out;
  for (const auto* set : {&v4, &v6}) {
    for (const auto& [family, packed] : *set) {
      char text[INET6_ADDRSTRLEN] = {};
      inet_ntop(family, packed.data(), text, sizeof(text));
      out.push_back(FormatHostPort(text, ep.port));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveEndpoints(absl::Span<const Endpoint> endpoints) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const Endpoint& ep : endpoints) {
    std::vector<std::string> ids;
    if (ep.dns) {
      absl::StatusOr<std::vector<std::string>> r = ResolveName(ep);
      if (!r.ok()) return r.status();
      ids = *std::move(r);
    } else {
      ids.push_back(FormatHostPort(ep.host, ep.port));
    }
    for (std::string& id : ids) {
      if (seen.insert(id).second) out.push_back(std::move(id));
    }
  }
  if (out.empty()) return absl::UnavailableError("the endpoints resolved to no addresses");
  return out;
}

}  // namespace turbokv::client
