// The default leaf store is compiled once here; other geometries (tests) are
// instantiated where they are used.
#include <tandem/host/leaf_store.hpp>

namespace tandem::host {

template class basic_leaf_store<bpa>;
template leaf_id basic_leaf_store<bpa>::apply_run(leaf_id, const record_run&, std::size_t,
                                                  std::vector<split_record>*, std::int64_t&, apply_path);
template leaf_id basic_leaf_store<bpa>::apply_run(leaf_id, const column_run&, std::size_t, split_sink*,
                                                  std::int64_t&, apply_path);

}  // namespace tandem::host
