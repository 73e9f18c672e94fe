#include "daemon/store/partition_ids.h"

#include <memory>
#include <string>
#include <utility>

#include "daemon/store/meta_keys.h"
#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace cdcview {
namespace {

class PartitionIdsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StorageConfig config;
    config.path = dir_.Sub("store");
    config.map_size = 8 << 20;
    auto store = Store::Open(config, {});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  absl::Status Load(PartitionIds* ids) {
    auto txn = store_->BeginRead();
    if (!txn.ok()) return txn.status();
    return ids->Load(**txn, store_->meta());
  }

  test::TempDir dir_;
  std::unique_ptr<Store> store_;
};

// A new partition gets the next id, unsaved until its batch says it committed; the ids a
// store holds come back with the next load, and new ones continue after them.
TEST_F(PartitionIdsTest, IdsAreGivenInTurnSavedWithTheirBatchAndLoadedAgain) {
  PartitionIds ids;
  ASSERT_TRUE(Load(&ids).ok());
  EXPECT_EQ(ids.Lookup("orders", "t/0").id, 1u);
  EXPECT_FALSE(ids.Lookup("orders", "t/0").saved);
  EXPECT_EQ(ids.Lookup("orders", "t/1").id, 2u);
  EXPECT_EQ(ids.Lookup("other", "t/0").id, 3u);
  {
    auto txn = store_->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE(ids.Save(txn->get(), store_->meta(), 1).ok());
    ASSERT_TRUE(ids.Save(txn->get(), store_->meta(), 3).ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  ids.MarkSaved(1);
  EXPECT_TRUE(ids.Lookup("orders", "t/0").saved);
  EXPECT_FALSE(ids.Lookup("orders", "t/1").saved);
  EXPECT_EQ(ids.Find(2), std::make_pair(std::string("orders"), std::string("t/1")));
  EXPECT_EQ(ids.Find(4), std::nullopt);
  EXPECT_EQ(ids.Find(0), std::nullopt);

  PartitionIds reloaded;
  ASSERT_TRUE(Load(&reloaded).ok());
  EXPECT_EQ(reloaded.Find(1), std::make_pair(std::string("orders"), std::string("t/0")));
  EXPECT_EQ(reloaded.Find(2), std::nullopt);  // never saved: no item holds it
  EXPECT_EQ(reloaded.Find(3), std::make_pair(std::string("other"), std::string("t/0")));
  EXPECT_TRUE(reloaded.Lookup("other", "t/0").saved);
  EXPECT_EQ(reloaded.Lookup("orders", "t/2").id, 4u);
}

TEST_F(PartitionIdsTest, AMalformedIdIsDataLossNamingItsKey) {
  {
    auto txn = store_->BeginWrite();
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE((*txn)->Put(store_->meta(), PartitionIdKey("orders", "t/0"), "0").ok());
    ASSERT_TRUE((*txn)->Commit().ok());
  }
  PartitionIds ids;
  absl::Status s = Load(&ids);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(s.message()), "meta key partition/orders/t/0 does not hold a partition id");
}

}  // namespace
}  // namespace cdcview
