// The origin table's peers, each written to the description of its design, for tests/bench/table_bench.c:
//   shards  16 shards of std::unordered_map, each under its own std::mutex (cuCascade PR #114)
//   rwmap   one std::map under a std::shared_mutex (RMM's tracking_resource_adaptor)
//   scan    a fixed 256-slot registry under one mutex, remove scanning every slot
//           (mnemosyne-backend 0.6.0)
// Keys are device addresses; the value stands for the origin record (24 bytes, as curesv's entry).
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "peers.h"

namespace {

struct record {
	uint64_t bytes;
	uint32_t origin, thread;
	uint64_t meta;
};

struct peer {
	virtual ~peer() = default;
	virtual bool insert(uint64_t key) = 0;
	virtual bool remove(uint64_t key) = 0;
};

struct shards final : peer {
	struct alignas(64) shard {
		std::mutex lock;
		std::unordered_map<uint64_t, record> map;
	};
	std::array<shard, 16> s;
	shard &of(uint64_t key) { return s[(key >> 21) % s.size()]; }
	bool insert(uint64_t key) override
	{
		shard &h = of(key);
		std::lock_guard<std::mutex> g(h.lock);
		return h.map.emplace(key, record{ 4096, 0, 1, 0 }).second;
	}
	bool remove(uint64_t key) override
	{
		shard &h = of(key);
		std::lock_guard<std::mutex> g(h.lock);
		return h.map.erase(key) == 1;
	}
};

struct rwmap final : peer {
	std::shared_mutex lock;
	std::map<uint64_t, record> map;
	bool insert(uint64_t key) override
	{
		std::unique_lock<std::shared_mutex> g(lock);
		return map.emplace(key, record{ 4096, 0, 1, 0 }).second;
	}
	bool remove(uint64_t key) override
	{
		std::unique_lock<std::shared_mutex> g(lock);
		return map.erase(key) == 1;
	}
};

struct scan final : peer {
	std::mutex lock;
	std::array<uint64_t, 256> keys{};
	std::array<record, 256> recs{};
	bool insert(uint64_t key) override
	{
		std::lock_guard<std::mutex> g(lock);
		for (size_t i = 0; i < keys.size(); i++)
			if (keys[i] == 0) {
				keys[i] = key;
				recs[i] = record{ 4096, 0, 1, 0 };
				return true;
			}
		return false;
	}
	bool remove(uint64_t key) override
	{
		std::lock_guard<std::mutex> g(lock);
		for (size_t i = 0; i < keys.size(); i++)
			if (keys[i] == key) {
				keys[i] = 0;
				return true;
			}
		return false;
	}
};

} // namespace

extern "C" {

struct peer_map *peer_create(enum peer_kind kind)
{
	peer *p = kind == PEER_SHARDS ? static_cast<peer *>(new shards)
		: kind == PEER_RWMAP ? static_cast<peer *>(new rwmap) : static_cast<peer *>(new scan);
	return reinterpret_cast<struct peer_map *>(p);
}

void peer_destroy(struct peer_map *m) { delete reinterpret_cast<peer *>(m); }
bool peer_insert(struct peer_map *m, uint64_t key) { return reinterpret_cast<peer *>(m)->insert(key); }
bool peer_remove(struct peer_map *m, uint64_t key) { return reinterpret_cast<peer *>(m)->remove(key); }

}
