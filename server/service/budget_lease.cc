#include "server/service/budget_lease.h"

#include <algorithm>
#include <utility>

namespace turbokv::server {

BudgetLease::BudgetLease(ByteBudget* budget, std::string_view tenant)
    : holder_(budget == nullptr ? nullptr : std::make_shared<Holder>(budget, tenant)) {}

bool BudgetLease::Acquire(uint64_t bytes, std::chrono::milliseconds timeout,
                          ByteBudget::Callback done) {
  if (holder_ == nullptr) return true;
  return !holder_->budget->Acquire(holder_->account.get(), bytes, timeout, std::move(done));
}

BudgetShare BudgetLease::Granted(uint64_t bytes) { return BudgetShare(holder_, bytes); }

bool BudgetLease::Cancel() {
  return holder_ != nullptr && holder_->budget->Cancel(holder_->account.get());
}

BudgetShare BudgetLease::Take(uint64_t bytes) {
  if (holder_ != nullptr && bytes != 0) holder_->budget->Take(holder_->account.get(), bytes);
  return BudgetShare(holder_, bytes);
}

void BudgetLease::Release(uint64_t bytes) {
  if (holder_ != nullptr && bytes != 0) holder_->budget->Release(holder_->account.get(), bytes);
}

uint64_t BudgetLease::held() const {
  return holder_ == nullptr ? 0 : holder_->budget->held(holder_->account.get());
}

BudgetShare::BudgetShare(BudgetShare&& other) noexcept
    : holder_(std::move(other.holder_)), bytes_(std::exchange(other.bytes_, 0)) {}

BudgetShare& BudgetShare::operator=(BudgetShare&& other) noexcept {
  if (this != &other) {
    Reset();
    holder_ = std::move(other.holder_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

BudgetShare BudgetShare::Split(uint64_t bytes) {
  const uint64_t n = std::min(bytes, bytes_);
  bytes_ -= n;
  return BudgetShare(holder_, n);
}

void BudgetShare::Absorb(BudgetShare other) {
  if (holder_ == nullptr) holder_ = other.holder_;
  bytes_ += std::exchange(other.bytes_, 0);
}

void BudgetShare::Reset() {
  if (holder_ != nullptr && bytes_ != 0) {
    holder_->Release(bytes_);
  }
  bytes_ = 0;
  holder_.reset();
}

}  // namespace turbokv::server
