#include <tandem/version.hpp>

#ifndef TANDEM_VERSION_STRING
#error "TANDEM_VERSION_STRING must be defined by the build"
#endif

namespace tandem {

const char* version() noexcept { return TANDEM_VERSION_STRING; }

bool built_with_cuda() noexcept {
#if defined(TANDEM_HAS_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace tandem
