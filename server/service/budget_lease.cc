#include "server/service/budget_lease.h"

#include <utility>

namespace turbokv::server {

BudgetLease::BudgetLease(ByteBudget* budget, std::string_view tenant)
    : budget_(budget), account_(budget->Open(tenant)) {}

BudgetLease::~BudgetLease() {
  if (budget_ != nullptr && account_ != nullptr) budget_->Close(std::move(account_));
}

BudgetLease::BudgetLease(BudgetLease&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), account_(std::move(other.account_)) {}

BudgetLease& BudgetLease::operator=(BudgetLease&& other) noexcept {
  if (this != &other) {
    if (budget_ != nullptr && account_ != nullptr) budget_->Close(std::move(account_));
    budget_ = std::exchange(other.budget_, nullptr);
    account_ = std::move(other.account_);
  }
  return *this;
}

bool BudgetLease::Acquire(uint64_t bytes, std::chrono::milliseconds timeout,
                          ByteBudget::Callback done) {
  if (budget_ == nullptr) return true;
  return !budget_->Acquire(account_.get(), bytes, timeout, std::move(done));
}

bool BudgetLease::Cancel() { return budget_ != nullptr && budget_->Cancel(account_.get()); }

void BudgetLease::Take(uint64_t bytes) {
  if (budget_ != nullptr && bytes != 0) budget_->Take(account_.get(), bytes);
}

void BudgetLease::Release(uint64_t bytes) {
  if (budget_ != nullptr) budget_->Release(account_.get(), bytes);
}

void BudgetLease::ReleaseAll() {
  if (budget_ != nullptr) budget_->Release(account_.get(), budget_->held(account_.get()));
}

uint64_t BudgetLease::held() const {
  return budget_ == nullptr ? 0 : budget_->held(account_.get());
}

}  // namespace turbokv::server
