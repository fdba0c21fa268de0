#include "runtime/kernel_link.h"

#include <mutex>

namespace neuron::rt {

namespace {
std::mutex& link_mu() {
  static std::mutex mu;
  return mu;
}
std::shared_ptr<KernelLink>& link_slot() {
  static std::shared_ptr<KernelLink> link;
  return link;
}
}  // namespace

void set_kernel_link(std::shared_ptr<KernelLink> link) {
  std::lock_guard<std::mutex> g(link_mu());
  link_slot() = std::move(link);
}

std::shared_ptr<KernelLink> kernel_link() {
  std::lock_guard<std::mutex> g(link_mu());
  return link_slot();
}

}  // namespace neuron::rt
