// The default leaf store is compiled once here; other geometries (tests) are
// instantiated where they are used.
#include <tandem/host/leaf_store.hpp>

namespace tandem::host {

template class basic_leaf_store<bpa>;

}  // namespace tandem::host
