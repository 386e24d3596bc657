#include "flowc/rpc/GrpcStatus.h"
#include "flowc/rpc/Vocabulary.h"

#include "../common/TestUtil.h"

namespace flowc::rpc {
namespace {

using flowc::testing::StatusIs;

// Every flowc code survives the trip through gRPC, message unchanged.
TEST(GrpcStatusTest, EveryCodeComesBackAsItWent) {
  for (StatusCode code :
       {StatusCode::InvalidArgument, StatusCode::NotFound, StatusCode::AlreadyExists,
        StatusCode::DataLoss, StatusCode::Unavailable, StatusCode::ResourceExhausted,
        StatusCode::FailedPrecondition, StatusCode::Unimplemented, StatusCode::Internal,
        StatusCode::Cancelled, StatusCode::Unauthenticated,
        StatusCode::PermissionDenied}) {
    Status sent(code, "model.onnx: node 'conv1' (Conv): bad kernel_shape");
    Status back = fromGrpcStatus(toGrpcStatus(sent));
    EXPECT_EQ(back.code(), code) << statusCodeName(code);
    EXPECT_EQ(back.message(), sent.message());
  }
  EXPECT_TRUE(toGrpcStatus(Status::ok()).ok());
  EXPECT_TRUE(fromGrpcStatus(grpc::Status::OK));
}

// gRPC codes flowc never sends are Internal, keeping the message.
TEST(GrpcStatusTest, ForeignCodesAreInternal) {
  EXPECT_THAT(
      fromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "too slow")),
      StatusIs(StatusCode::Internal, "too slow"));
}

// The details carry the fields the message names, and parse back.
TEST(GrpcStatusTest, DetailsCarryTheFieldsTheMessageNames) {
  grpc::Status sent = toGrpcStatus(
      invalidArgument("/m/model.onnx: node 'conv1' (Conv): bad kernel_shape"));
  EXPECT_EQ(sent.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::optional<flowc::v1::ErrorDetail> detail = parseErrorDetail(sent.error_details());
  ASSERT_TRUE(detail);
  EXPECT_EQ(detail->code(), static_cast<int>(StatusCode::InvalidArgument));
  EXPECT_EQ(detail->kind(), "invalid_argument");
  EXPECT_EQ(detail->file(), "/m/model.onnx");
  EXPECT_EQ(detail->node(), "conv1");
  EXPECT_EQ(detail->op(), "Conv");
  EXPECT_FALSE(parseErrorDetail(""));
  EXPECT_FALSE(parseErrorDetail("\xff\xff\xff"));
}

// The wire's enums: UNSPECIFIED is the default, every value maps both ways,
// and an unknown number is refused naming the field.
TEST(VocabularyTest, EnumsMapBothWaysAndUnsetIsTheDefault) {
  EXPECT_EQ(*targetFromProto(flowc::v1::TARGET_UNSPECIFIED, "options.target"),
            Target::Cpu);
  for (Target target :
       {Target::Cpu, Target::CudaSm80, Target::CudaSm90, Target::CudaSm120})
    EXPECT_EQ(*targetFromProto(toProto(target), "options.target"), target);
  EXPECT_EQ(*precisionFromProto(flowc::v1::PRECISION_UNSPECIFIED, "options.precision"),
            Precision::Fp32);
  for (Precision precision : {Precision::Fp32, Precision::Bf16})
    EXPECT_EQ(*precisionFromProto(toProto(precision), "options.precision"), precision);
  EXPECT_THAT(
      targetFromProto(5, "options.target"),
      StatusIs(StatusCode::InvalidArgument,
               "options.target is 5, not a value this daemon knows (supported: cpu, "
               "cuda:sm_75, cuda:sm_80"));
  EXPECT_THAT(precisionFromProto(-1, "options.precision"),
              StatusIs(StatusCode::InvalidArgument, "options.precision is -1"));
}

} // namespace
} // namespace flowc::rpc
