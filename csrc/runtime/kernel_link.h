// The process group that collectives inside NKI kernels (nki.collectives across the logical
// cores of a job) run over. The framework's distributed backend owns the transport and
// registers one link for its world group; the NKI core, which builds without the framework,
// finds it here. A process without a registered link is a world of one logical core.
// Thread-safety: set_kernel_link()/kernel_link() may be called from any thread; a link runs
// one exchange at a time (callers serialize), abort() may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/collective_desc.h"

namespace neuron::rt {

class KernelLink {
 public:
  virtual ~KernelLink() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank contributes `in` (lengths may differ); returns every rank's bytes, by rank. The
  // ranks first compare `desc` (a mismatch throws rt::Error naming the ranks and what each
  // calls); a peer that failed or exited makes the wait fail naming it. Throws rt::Error.
  virtual std::vector<std::string> all_gather(const CollectiveDesc& desc, const std::string& in) = 0;
  // Marks this rank failed (peers waiting on it fail at once); later exchanges throw.
  virtual void abort(const std::string& reason) noexcept = 0;
};

// Registers (or, with null, removes) the link of this process.
void set_kernel_link(std::shared_ptr<KernelLink> link);
// The registered link, or null (a world of one).
std::shared_ptr<KernelLink> kernel_link();

}  // namespace neuron::rt
