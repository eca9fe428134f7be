// The default leaf store is compiled once here; other geometries (tests) are
// instantiated where they are used.
#include <tandem/host/leaf_store.hpp>

namespace tandem::host {

template class basic_leaf_store<bpa>;
template leaf_id basic_leaf_store<bpa>::apply(leaf_id, const point_op*, std::size_t, point_result*,
                                              std::vector<split_record>*, apply_path);
template leaf_id basic_leaf_store<bpa>::apply(leaf_id, const point_op*, std::size_t, point_result*, split_sink*,
                                              apply_path);

}  // namespace tandem::host
