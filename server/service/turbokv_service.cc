#include "server/service/turbokv_service.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/service/get_blocks_reactor.h"
#include "server/service/put_blocks_reactor.h"
#include "server/service/reactor_ref.h"
#include "server/service/wire_format.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::server {
namespace {

// Hash views for the store; InvalidArgument naming the first bad one.
absl::StatusOr<std::vector<std::string_view>> HashViews(
    const google::protobuf::RepeatedPtrField<std::string>& hashes) {
  std::vector<std::string_view> views;
  views.reserve(hashes.size());
  for (int i = 0; i < hashes.size(); ++i) {
    absl::Status s = ValidateBlockHash(hashes[i]);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("block_hashes[", i, "]: ", s.message()));
    }
    views.push_back(hashes[i]);
  }
  return views;
}

// A stream refused before it started (authentication, quota): finishes at once, reported
// through RpcScope like every call.
template <typename Base>
class RefusedReactor final : public Base {
 public:
  RefusedReactor(ServiceContext* ctx, RpcMethod method, const absl::Status& status) {
    RpcScope scope(ctx, method);
    this->Finish(scope.Complete(status));
    HandedToGrpc(this);
  }
  void OnDone() override {
    InReaction(this);
    delete this;
  }
};

}  // namespace

TurboKvService::TurboKvService(ServiceContext* ctx, std::string version)
    : ctx_(ctx), version_(std::move(version)) {}

grpc::ServerUnaryReactor* TurboKvService::Unary(grpc::CallbackServerContext* context,
                                                RpcMethod method, Where where,
                                                std::function<absl::Status(const Principal&)> fn) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(ctx_, method);
  if (ctx_->shutting_down.load()) {
    reactor->Finish(scope->Complete(ShuttingDown()));
    return reactor;
  }
  absl::StatusOr<Principal> caller = Authenticate(*ctx_, *context, method);
  if (!caller.ok()) {
    reactor->Finish(scope->Complete(caller.status()));
    return reactor;
  }
  // Runs fn inside the exception barrier; a call cancelled (or past its deadline) while it
  // waited in the queue is answered without running it.
  auto run = [this, reactor, scope, context, caller = *std::move(caller), fn = std::move(fn)] {
    absl::Status s;
    if (context->IsCancelled()) {
      s = absl::CancelledError(
          absl::StrCat(RpcMethodName(scope->method()), " cancelled before it ran"));
    } else {
      s = Guarded(ctx_, RpcMethodName(scope->method()), [&] { return fn(caller); });
    }
    reactor->Finish(scope->Complete(s));
  };
  if (where == Where::kInline) {
    run();
  } else if (!ctx_->io_pool->Submit(run, [reactor, scope](const absl::Status& s) {
               reactor->Finish(scope->Complete(s));
             })) {
    reactor->Finish(scope->Complete(PoolFull(*ctx_->io_pool)));
  }
  return reactor;
}

grpc::ServerUnaryReactor* TurboKvService::RegisterNamespace(
    grpc::CallbackServerContext* context, const v1::RegisterNamespaceRequest* request,
    v1::RegisterNamespaceResponse* response) {
  return Unary(context, RpcMethod::kRegisterNamespace, Where::kPool,
               [this, request, response](const Principal& caller) -> absl::Status {
                 if (!request->has_namespace_descriptor()) {
                   return absl::InvalidArgumentError("namespace_descriptor is required");
                 }
                 TURBOKV_ASSIGN_OR_RETURN(
                     NamespaceRegistry::Registered r,
                     ctx_->registry->Register(request->namespace_descriptor(), caller.tenant));
                 response->set_namespace_id(r.ns->id);
                 response->set_created(r.created);
                 *response->mutable_namespace_descriptor() = r.ns->descriptor;
                 response->set_raw_block_bytes(r.ns->codec.raw_bytes());
                 response->set_packed_block_bytes(r.ns->codec.packed_bytes());
                 response->set_bits_per_value(r.ns->codec.bits_per_value());
                 return absl::OkStatus();
               });
}

grpc::ServerReadReactor<v1::PutBlocksRequest>* TurboKvService::PutBlocks(
    grpc::CallbackServerContext* context, v1::PutBlocksResponse* response) {
  absl::StatusOr<Principal> caller = Authenticate(*ctx_, *context, RpcMethod::kPutBlocks);
  // No quota check here: the store keeps the tenant within its quota as blocks commit.
  if (!caller.ok()) {
    return new RefusedReactor<grpc::ServerReadReactor<v1::PutBlocksRequest>>(
        ctx_, RpcMethod::kPutBlocks, caller.status());
  }
  return new PutBlocksReactor(ctx_, context, response, *std::move(caller));
}

grpc::ServerUnaryReactor* TurboKvService::Lookup(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  // Index only (in memory): cheap enough for gRPC's thread.
  return Unary(
      context, RpcMethod::kLookup, Where::kInline,
      [this, request, response](const Principal& caller) -> absl::Status {
        grpc::Slice bytes;
        if (!request->DumpToSingleSlice(&bytes).ok()) {
          return absl::InvalidArgumentError("the request is not a LookupRequest");
        }
        LookupRequestView req;
        TURBOKV_RETURN_IF_ERROR(ParseLookupRequest(
            std::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()), &req));
        TURBOKV_ASSIGN_OR_RETURN(std::shared_ptr<const Namespace> ns,
                                 ctx_->registry->Get(req.namespace_id, caller));
        TURBOKV_RETURN_IF_ERROR(CheckHashCount(*ctx_, req.block_hashes.size()));
        if (req.lease_seconds > ctx_->limits.max_lease_seconds) {
          return absl::InvalidArgumentError(
              absl::StrCat("lease_seconds ", req.lease_seconds, " is over the server's limit ",
                           ctx_->limits.max_lease_seconds, " (--max-lease-seconds)"));
        }
        for (size_t i = 0; i < req.block_hashes.size(); ++i) {
          absl::Status s = ValidateBlockHash(req.block_hashes[i]);
          if (!s.ok()) {
            return absl::InvalidArgumentError(absl::StrCat("block_hashes[", i, "]: ", s.message()));
          }
        }
        // The cluster's tuning first, so this call's hits are ranked by it.
        if (req.follow_tuning.has_value()) ctx_->store->FollowPolicyTuning(*req.follow_tuning);
        TURBOKV_ASSIGN_OR_RETURN(size_t matched,
                                 ctx_->store->Lookup(ns->id, req.block_hashes, req.lease_seconds));
        const uint64_t block_tokens = ns->descriptor.block_tokens();
        v1::LookupResponse out;
        out.set_matched_blocks(static_cast<uint32_t>(matched));
        out.set_matched_tokens(matched * block_tokens);
        if (const std::optional<PolicyTuning> tuning = ctx_->store->policy_tuning()) {
          out.mutable_tuning()->set_half_life(tuning->half_life);
          out.mutable_tuning()->set_unseen_age(tuning->unseen_age);
        }
        bool own = false;
        if (!grpc::SerializationTraits<v1::LookupResponse>::Serialize(out, response, &own).ok()) {
          return absl::InternalError("LookupResponse did not serialize");
        }
        ctx_->metrics->RecordLookup(req.block_hashes.size(), matched, block_tokens);
        return absl::OkStatus();
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TurboKvService::GetBlocks(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  absl::StatusOr<Principal> caller = Authenticate(*ctx_, *context, RpcMethod::kGetBlocks);
  if (!caller.ok()) {
    return new RefusedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>(
        ctx_, RpcMethod::kGetBlocks, caller.status());
  }
  return new GetBlocksReactor(ctx_, context, request, *std::move(caller));
}

grpc::ServerUnaryReactor* TurboKvService::DeleteBlocks(grpc::CallbackServerContext* context,
                                                       const v1::DeleteBlocksRequest* request,
                                                       v1::DeleteBlocksResponse* response) {
  return Unary(context, RpcMethod::kDeleteBlocks, Where::kPool,
               [this, request, response](const Principal& caller) -> absl::Status {
                 TURBOKV_ASSIGN_OR_RETURN(std::shared_ptr<const Namespace> ns,
                                          ctx_->registry->Get(request->namespace_id(), caller));
                 TURBOKV_RETURN_IF_ERROR(CheckHashCount(*ctx_, request->block_hashes_size()));
                 TURBOKV_ASSIGN_OR_RETURN(std::vector<std::string_view> hashes,
                                          HashViews(request->block_hashes()));
                 TURBOKV_ASSIGN_OR_RETURN(uint64_t deleted,
                                          ctx_->store->DeleteBlocks(ns->id, hashes));
                 response->set_deleted_blocks(static_cast<uint32_t>(deleted));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TurboKvService::DropNamespace(grpc::CallbackServerContext* context,
                                                        const v1::DropNamespaceRequest* request,
                                                        v1::DropNamespaceResponse* response) {
  return Unary(context, RpcMethod::kDropNamespace, Where::kPool,
               [this, request, response](const Principal& caller) -> absl::Status {
                 TURBOKV_ASSIGN_OR_RETURN(uint64_t deleted,
                                          ctx_->registry->Drop(request->namespace_id(), caller));
                 response->set_deleted_blocks(deleted);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* TurboKvService::Stats(grpc::CallbackServerContext* context,
                                                const v1::StatsRequest* request,
                                                v1::StatsResponse* response) {
  return Unary(
      context, RpcMethod::kStats, Where::kInline,
      [this, request, response](const Principal& caller) -> absl::Status {
        const StoreStats s = ctx_->store->Stats();
        response->set_codec_backend(ctx_->backend.name);
        response->set_durability(std::string(DurabilityName(ctx_->store->options().durability)));
        response->set_version(version_);
        if (caller.admin) {
          // Server-wide activity counters: a tenant's view leaves them at 0, since evictions and
          // checksum failures of other tenants' blocks would tell it about their traffic.
          response->set_evicted_blocks(s.evicted_blocks);
          response->set_checksum_failures(s.checksum_failures);
          response->set_capacity_bytes(s.capacity_bytes);
          response->set_used_bytes(s.used_bytes);
          response->set_stored_bytes(s.value_bytes);
          response->set_blocks(s.blocks);
          response->set_logical_bytes(s.logical_bytes);
        } else {
          // A tenant sees its own namespaces and totals, and its quota as its capacity.
          uint64_t stored = 0, blocks = 0, logical = 0;
          for (const NamespaceStatsEntry& n : s.namespaces) {
            auto ns = ctx_->registry->Get(n.record.id, caller);
            if (!ns.ok()) continue;
            stored += n.value_bytes;
            blocks += n.blocks;
            logical += n.logical_bytes;
          }
          const uint64_t quota = ctx_->auth != nullptr ? ctx_->auth->QuotaBytes(caller.tenant) : 0;
          response->set_capacity_bytes(quota != 0 ? std::min(quota, s.capacity_bytes)
                                                  : s.capacity_bytes);
          response->set_used_bytes(stored);
          response->set_stored_bytes(stored);
          response->set_blocks(blocks);
          response->set_logical_bytes(logical);
        }
        // One page of namespaces (sorted by id): a response stays small however many there are.
        const uint32_t page = ctx_->limits.max_stats_namespaces;
        for (const NamespaceStatsEntry& n : s.namespaces) {
          if (request->has_page_after() && n.record.id <= request->page_after()) continue;
          auto ns = ctx_->registry->Get(n.record.id, caller);
          if (!ns.ok() && !caller.admin) continue;  // another tenant's
          if (static_cast<uint32_t>(response->namespaces_size()) == page) {
            response->set_next_page_after(response->namespaces(page - 1).namespace_id());
            break;
          }
          v1::NamespaceStats* out = response->add_namespaces();
          out->set_namespace_id(n.record.id);
          if (ns.ok()) {
            *out->mutable_namespace_descriptor() = (*ns)->descriptor;
            out->set_tenant((*ns)->tenant);
          }
          out->set_blocks(n.blocks);
          out->set_stored_bytes(n.value_bytes);
          out->set_logical_bytes(n.logical_bytes);
        }
        return absl::OkStatus();
      });
}

}  // namespace turbokv::server
