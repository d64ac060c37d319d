#include "exporter_command.h"

#include <httplib.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>
#include <system_error>
#include <vector>

#include "prometheus_metrics.h"
#include "standard_output.h"
#include "stats_scan.h"

namespace vramspill::cli {
namespace {

constexpr const char* kProgram = "vramspill exporter";

struct ListenAddress {
  std::string host;  // without the brackets of an IPv6 address
  int port = 0;
  std::string text;  // as given
};

// HOST:PORT, or [ADDRESS]:PORT for an IPv6 address; nullopt and the reason otherwise.
std::optional<ListenAddress> parse_listen_address(const std::string& text, std::string& error) {
  std::string host;
  std::string port;
  if (text.starts_with('[')) {
    const auto close = text.find("]:");
    if (close == std::string::npos) {
      error = "expected [ADDRESS]:PORT, got '" + text + "'";
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) {
      error = "expected HOST:PORT, got '" + text + "'";
      return std::nullopt;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      error = "write an IPv6 address in brackets, as in [::1]:9477, got '" + text + "'";
      return std::nullopt;
    }
  }
  int number = -1;
  const auto [end, problem] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (host.empty() || port.empty() || problem != std::errc() || end != port.data() + port.size() ||
      number < 0 || number > 65535) {
    error = "expected HOST:PORT with a port from 0 to 65535, got '" + text + "'";
    return std::nullopt;
  }
  return ListenAddress{host, number, text};
}

// The resolver's complaint about `host`, or empty when it names addresses to listen on.
std::string resolve_problem(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (status != 0) return gai_strerror(status);
  freeaddrinfo(found);
  return "";
}

// Binds to `address`; the port bound (the one the system chose for port 0), or -1 after saying
// why not.
int bind_server(httplib::Server& server, const ListenAddress& address) {
  if (const std::string problem = resolve_problem(address.host); !problem.empty()) {
    std::cerr << kProgram << ": cannot listen on " << address.text << ": " << problem << "\n";
    return -1;
  }
  // httplib's default sets SO_REUSEPORT, with which a second exporter binds the same port and
  // takes half the scrapes; SO_REUSEADDR alone still lets a restarted one bind at once.
  server.set_socket_options([](socket_t socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  errno = 0;
  const int port = address.port == 0 ? server.bind_to_any_port(address.host)
                   : server.bind_to_port(address.host, address.port) ? address.port
                                                                     : -1;
  if (port < 0) {
    const int error = errno;
    std::cerr << kProgram << ": cannot listen on " << address.text << ": "
              << (error != 0 ? std::strerror(error) : "bind failed") << "\n";
  }
  return port;
}

void add_routes(httplib::Server& server, const std::string& directory) {
  struct Scraper {
    std::mutex mutex;  // one scan at a time: scans delete killed jobs' files
    std::vector<std::string> directories;
    std::vector<std::string> reported;
  };
  auto scraper = std::make_shared<Scraper>();
  scraper->directories = stats_directories(directory);
  server.Get("/metrics", [scraper](const httplib::Request&, httplib::Response& response) {
    const std::lock_guard lock(scraper->mutex);
    response.set_content(render_prometheus_metrics(scan_stats_directories(
                             scraper->directories, kProgram, scraper->reported)),
                         kPrometheusContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("vramspill exporter: the metrics are at /metrics\n",
                         "text/plain; charset=utf-8");
  });
  server.set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (response.status == 404)
      response.set_content("not found: vramspill exporter serves /metrics\n",
                           "text/plain; charset=utf-8");
  });
}

// Note [Stopping the exporter]
// SIGINT and SIGTERM are blocked in every thread (httplib's workers inherit the mask of the
// thread that creates them) and taken by sigwait() on the main thread, which stops the server
// and waits for the listening thread: no handler runs in a signal context. Server::stop() does
// nothing before the listening thread has started listening (httplib's is_running()), so a
// signal that comes that early waits for it first. The listening thread sends the main thread
// SIGTERM when it ends by itself, so that it is never waited for in vain.
int serve(httplib::Server& server, const ListenAddress& address, int port, const sigset_t& stop) {
  const std::string host =
      address.host.find(':') == std::string::npos ? address.host : "[" + address.host + "]";
  std::cout << kProgram << ": serving http://" << host << ":" << port << "/metrics" << std::endl;
  const pthread_t main_thread = pthread_self();
  int listen_error = 0;
  std::future<bool> listening = std::async(std::launch::async, [&] {
    const bool stopped = server.listen_after_bind();
    if (!stopped) {
      listen_error = errno;
      pthread_kill(main_thread, SIGTERM);
    }
    return stopped;
  });
  int signal = 0;
  sigwait(&stop, &signal);
  while (!server.is_running() &&
         listening.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
  }
  server.stop();
  if (listening.get()) return 0;
  std::cerr << kProgram << ": stopped serving on " << address.text << ": "
            << std::strerror(listen_error) << "\n";
  return 1;
}

}  // namespace

void add_exporter_options(CLI::App& app, ExporterOptions& options) {
  app.add_option("--listen", options.listen,
                 "Serve at HOST:PORT, or [ADDRESS]:PORT for IPv6 (default 127.0.0.1:9477; "
                 "port 0: one the system chooses).")
      ->check(CLI::Validator(
          [](const std::string& text) {
            std::string error;
            return parse_listen_address(text, error) ? std::string() : error;
          },
          "", ""))
      ->type_name("HOST:PORT");
  app.add_flag("--once", options.once,
               "Print the metrics once on standard output and exit, serving nothing.");
  app.add_option("--directory", options.directory,
                 "Read the stats files in DIR instead of the default locations. It may be "
                 "made after the exporter starts (a warning says so when it is missing).")
      ->type_name("DIR");
  app.footer(
      "Serves GET /metrics in Prometheus's text format (and a line pointing there at /; "
      "anything else is 404), reading the stats files at each scrape, from where `vramspill "
      "stat` reads them, and deleting killed jobs' files as stat does. Once bound, prints "
      "\"vramspill exporter: serving http://HOST:PORT/metrics\". SIGINT or SIGTERM stops it.\n\n"
      "Metrics: vramspill_jobs, vramspill_stale_jobs, vramspill_unreadable_stats_files; per job "
      "(labels pid and command) "
      "vramspill_job_start_time_seconds, vramspill_job_last_publish_timestamp_seconds, "
      "vramspill_job_publishes_total, vramspill_host_pool_pinned_bytes, "
      "vramspill_host_spilled_bytes, vramspill_host_tiered_bytes, vramspill_host_limit_bytes, "
      "vramspill_tiered_evicted_bytes_total, vramspill_tiered_promoted_bytes_total, "
      "vramspill_remap_windows_total, vramspill_remap_window_seconds_total, "
      "vramspill_tiered_move_vmm_calls_total, vramspill_tiered_launches_total, vramspill_tiered_unreadable_launches_total; per device "
      "(and label "
      "device) "
      "vramspill_device_memory_bytes, vramspill_device_limit_bytes, vramspill_device_held_bytes, "
      "vramspill_device_peak_bytes, vramspill_device_spilled_bytes (tier managed or host), "
      "vramspill_spills_total, vramspill_refusals_total, vramspill_tiered_block_bytes (location "
      "device or host). A second job with the same pid (another PID namespace) writes "
      "PID-1.stats and is labelled pid=\"PID-1\", and so on: the label is the file's name.\n\n"
      "Exit status: 0 (after --once, or stopped by a signal); 1 when it cannot listen, or "
      "--once cannot write standard output; 2 for a usage error.");
}

int run_exporter_command(const ExporterOptions& options) {
  // Jobs may make it later, so a missing directory is not an error; but a typo should not serve
  // "no jobs" in silence.
  if (std::error_code ignored; !options.directory.empty() &&
                               !std::filesystem::is_directory(options.directory, ignored))
    std::cerr << kProgram << ": warning: " << options.directory
              << " is not a directory (yet): no jobs until it is\n";
  if (options.once) {
    std::vector<std::string> reported;
    std::cout << render_prometheus_metrics(scan_stats_directories(
        stats_directories(options.directory), kProgram, reported));
    return exit_status_after_output(kProgram, 0);
  }
  std::string error;
  const std::optional<ListenAddress> address = parse_listen_address(options.listen, error);
  if (!address) return 2;  // the option's check has said why
  // Note [Stopping the exporter]: blocked before httplib starts a thread.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  httplib::Server server;
  add_routes(server, options.directory);
  const int port = bind_server(server, *address);
  if (port < 0) return 1;
  return serve(server, *address, port, stop);
}

}  // namespace vramspill::cli
