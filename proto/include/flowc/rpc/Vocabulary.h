// flowc's compile vocabulary (support/Target.h) as the wire's enums: one
// pair of conversions per enum, for every producer and the daemon's edge.
#pragma once

#include "flowc/support/SearchBudget.h"
#include "flowc/support/Status.h"
#include "flowc/support/Target.h"

#include "flowc/v1/flowc.pb.h"

#include <string_view>

namespace flowc::rpc {

flowc::v1::Target toProto(Target target);
flowc::v1::Precision toProto(Precision precision);

/// The enum a request carries: UNSPECIFIED is the default (Cpu, Fp32);
/// InvalidArgument naming `field` for a number this build does not know
/// (a newer client's, or garbage).
Expected<Target> targetFromProto(int target, std::string_view field);
Expected<Precision> precisionFromProto(int precision, std::string_view field);

flowc::v1::SearchBudget toProto(const SearchBudget &budget);
/// InvalidArgument naming `field` for an unknown mode or seconds out of
/// (0, kMaxSearchSeconds].
Expected<SearchBudget> searchBudgetFromProto(const flowc::v1::SearchBudget &budget,
                                             std::string_view field);

} // namespace flowc::rpc
