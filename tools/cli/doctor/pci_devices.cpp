#include "doctor/pci_devices.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "doctor/text_files.h"

namespace vramspill::cli::doctor {
namespace {

constexpr std::string_view kNvidiaVendor = "0x10de";
constexpr std::string_view kDisplayClass = "0x03";  // VGA (0x0300) and 3D (0x0302) controllers

std::string devices_directory(std::string_view root) {
  return std::string(root) + "/sys/bus/pci/devices/";
}

std::string first_word(const std::optional<std::string>& text) {
  if (!text) return "";
  const std::size_t start = text->find_first_not_of(" \t\n");
  if (start == std::string::npos) return "";
  return text->substr(start, text->find_first_of(" \t\n", start) - start);
}

bool is_nvidia_gpu(const std::string& directory) {
  return first_word(read_text_file(directory + "/vendor")) == kNvidiaVendor &&
         first_word(read_text_file(directory + "/class")).starts_with(kDisplayClass);
}

// "16.0 GT/s PCIe" (or "16 GT/s" from older kernels); nullopt for "Unknown" or no file.
std::optional<double> link_speed(const std::string& path) {
  const std::string word = first_word(read_text_file(path));
  char* end = nullptr;
  const double speed = std::strtod(word.c_str(), &end);
  if (word.empty() || end != word.c_str() + word.size() || speed <= 0) return std::nullopt;
  return speed;
}

std::optional<int> link_width(const std::string& path) {
  const std::optional<long long> width = read_integer_file(path);
  if (!width || *width <= 0) return std::nullopt;
  return static_cast<int>(*width);
}

}  // namespace

std::vector<std::string> nvidia_gpu_addresses(std::string_view root) {
  std::vector<std::string> addresses;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(devices_directory(root), error))
    if (is_nvidia_gpu(entry.path().string())) addresses.push_back(entry.path().filename());
  std::sort(addresses.begin(), addresses.end());
  return addresses;
}

std::optional<PciDevice> read_pci_device(std::string_view root, const std::string& address) {
  const std::string directory = devices_directory(root) + address;
  if (!is_nvidia_gpu(directory)) return std::nullopt;
  PciDevice device;
  device.address = address;
  device.device_id = first_word(read_text_file(directory + "/device"));
  const std::optional<long long> node = read_integer_file(directory + "/numa_node");
  if (node && *node >= 0) device.numa_node = static_cast<int>(*node);
  device.current = {link_speed(directory + "/current_link_speed"),
                    link_width(directory + "/current_link_width")};
  device.max = {link_speed(directory + "/max_link_speed"),
                link_width(directory + "/max_link_width")};
  return device;
}

int pcie_generation(double speed_gts) {
  // Each generation's lane rate: 2.5, 5, 8, 16, 32, 64 GT/s.
  constexpr double kRates[] = {2.5, 5.0, 8.0, 16.0, 32.0, 64.0};
  for (int generation = 1; generation <= 6; ++generation)
    if (std::abs(speed_gts - kRates[generation - 1]) < 0.01) return generation;
  return 0;
}

}  // namespace vramspill::cli::doctor
