variable "pool_name" {
  description = "Name of the Auto Scaling group. Also the runner name prefix: every runner registers as `<pool_name>-<instance id>`, which is how the controller maps a runner to its instance. List it under the runner type's `pools` in the controller config."
  type        = string

  validation {
    # GitHub runner names are at most 64 characters; an instance id plus '-' takes 20.
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,43}$", var.pool_name))
    error_message = "pool_name must be 1-44 characters of letters, digits, '.', '_' or '-', starting with a letter or digit."
  }
}

variable "runner_type" {
  description = "The controller's runner type this pool serves (a key under `runner_types` in its config). Written to the group's `ci-autoscaler:runner-type` tag."
  type        = string

  validation {
    condition     = length(trimspace(var.runner_type)) > 0 && length(var.runner_type) <= 256
    error_message = "runner_type must be a non-empty string of at most 256 characters."
  }
}

variable "labels" {
  description = "Labels every runner of this pool registers with; must cover the runner type's labels in the controller config. GitHub's default labels (self-hosted, Linux, X64/ARM64) are added by the runner itself."
  type        = list(string)

  validation {
    condition     = length(var.labels) > 0 && alltrue([for l in var.labels : can(regex("^[^,\\s]+$", l))])
    error_message = "labels must be a non-empty list of labels without commas or whitespace."
  }
}

variable "github_url" {
  description = "Where runners register: the organization URL, e.g. `https://github.com/my-org` (GitHub Enterprise Server: `https://HOST/my-org`). For a user owner, the URL of the repository the controller registers runners at (the first watched repository, sorted)."
  type        = string

  validation {
    condition     = can(regex("^https://[^/]+/[^/]+(/[^/]+)?/?$", var.github_url))
    error_message = "github_url must be an https URL naming an organization (https://github.com/my-org) or a repository (https://github.com/me/repo)."
  }
}

variable "mode" {
  description = "The controller's `mode` for this pool's runner type. `ephemeral`: each instance reads the just-in-time runner config the controller wrote for it, runs `run.sh --jitconfig`, takes one job and waits for the controller to terminate it. `persistent`: each instance claims the one-hour registration token the controller wrote for it (reads it, deletes the parameter, and registers only when that delete succeeded), registers with `config.sh`, takes one job and powers off. In both modes no long-lived GitHub credential ever reaches an instance."
  type        = string
  default     = "ephemeral"

  validation {
    condition     = contains(["ephemeral", "persistent"], var.mode)
    error_message = "mode must be ephemeral or persistent, as the runner type's mode in the controller config."
  }
}

variable "jit_parameter_path" {
  description = "The controller's `jit.parameter_path`: each instance reads its own credential from the SSM SecureString `<jit_parameter_path>/<pool_name>/<instance id>`, which the controller writes and tags with the instance's id. The instance role may read (and delete) only the parameter tagged with its own instance id."
  type        = string
  default     = "/ci-autoscaler/jit"

  validation {
    condition     = can(regex("^(/[A-Za-z0-9_.\\-]+)+$", var.jit_parameter_path))
    error_message = "jit_parameter_path must be an SSM path such as /ci-autoscaler/jit (leading '/', no trailing '/')."
  }
}

variable "jit_wait_for_termination" {
  description = "Ephemeral mode: seconds an instance whose runner finished its job waits for the controller to terminate it (with the group's desired capacity decremented, so the group does not replace it) before it powers itself off."
  type        = number
  default     = 900
}

variable "runner_group" {
  description = "Runner group the runners join (organization runner groups); `Default` if unset."
  type        = string
  default     = "Default"
}

variable "runner_version" {
  description = "Version of actions/runner to install, without the leading v."
  type        = string
  default     = "2.321.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.runner_version))
    error_message = "runner_version must look like 2.321.0."
  }
}

variable "runner_sha256" {
  description = "Expected SHA-256 of the runner tarball; empty skips the check (not recommended)."
  type        = string
  default     = ""

  validation {
    condition     = var.runner_sha256 == "" || can(regex("^[0-9a-f]{64}$", var.runner_sha256))
    error_message = "runner_sha256 must be empty or 64 lower-case hex digits."
  }
}

variable "runner_arch" {
  description = "Runner build to install: x64 or arm64 (match the AMI and instance types)."
  type        = string
  default     = "x64"

  validation {
    condition     = contains(["x64", "arm64"], var.runner_arch)
    error_message = "runner_arch must be x64 or arm64."
  }
}

variable "ami_id" {
  description = "AMI the runners boot (Ubuntu or Amazon Linux with curl, tar and the AWS CLI; GPU pools: an image with the NVIDIA driver)."
  type        = string

  validation {
    condition     = can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must be an AMI id such as ami-0123456789abcdef0."
  }
}

variable "instance_types" {
  description = "Instance types, in order of preference. The first is the launch template's type; all of them are overrides when the mixed-instances policy is on."
  type        = list(string)

  validation {
    condition     = length(var.instance_types) > 0 && alltrue([for t in var.instance_types : can(regex("^[a-z0-9-]+\\.[a-z0-9-]+$", t))])
    error_message = "instance_types must be a non-empty list of EC2 instance types such as c6i.4xlarge."
  }
}

variable "root_volume_size_gb" {
  description = "Size of the root volume in GiB (workspaces, caches, images)."
  type        = number
  default     = 100

  validation {
    condition     = var.root_volume_size_gb >= 8 && var.root_volume_size_gb <= 16384 && floor(var.root_volume_size_gb) == var.root_volume_size_gb
    error_message = "root_volume_size_gb must be a whole number between 8 and 16384."
  }
}

variable "root_volume_type" {
  description = "EBS volume type of the root volume."
  type        = string
  default     = "gp3"

  validation {
    condition     = contains(["gp2", "gp3", "io1", "io2"], var.root_volume_type)
    error_message = "root_volume_type must be one of gp2, gp3, io1, io2."
  }
}

variable "root_device_name" {
  description = "Device name of the AMI's root volume (/dev/sda1 on Ubuntu, /dev/xvda on Amazon Linux)."
  type        = string
  default     = "/dev/sda1"
}

variable "subnet_ids" {
  description = "Subnets the group launches into (spread across availability zones for capacity)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) > 0 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids must be a non-empty list of subnet ids."
  }
}

variable "security_group_ids" {
  description = "Security groups of the runner instances (they need outbound HTTPS to GitHub and AWS; no inbound)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.security_group_ids : can(regex("^sg-[0-9a-f]+$", s))])
    error_message = "security_group_ids must be security group ids (sg-...)."
  }
}

variable "min_size" {
  description = "Minimum size of the group. The controller keeps warm capacity through `min_idle`; leave this at 0 unless instances must exist regardless."
  type        = number
  default     = 0

  validation {
    condition     = var.min_size >= 0 && floor(var.min_size) == var.min_size
    error_message = "min_size must be a whole number >= 0."
  }
}

variable "max_size" {
  description = "Maximum size of the group; the controller never asks for more."
  type        = number

  validation {
    condition     = var.max_size >= 1 && floor(var.max_size) == var.max_size && var.max_size >= var.min_size
    error_message = "max_size must be a whole number >= 1 and >= min_size."
  }
}

variable "spot" {
  description = "Spot/on-demand mix. null: on-demand only, from the launch template. Otherwise a mixed-instances policy over every instance type."
  type = object({
    on_demand_base_capacity                  = optional(number, 0)
    on_demand_percentage_above_base_capacity = optional(number, 0)
    spot_allocation_strategy                 = optional(string, "price-capacity-optimized")
    capacity_rebalance                       = optional(bool, true)
  })
  default = null

  validation {
    condition = var.spot == null ? true : (
      var.spot.on_demand_base_capacity >= 0 &&
      var.spot.on_demand_percentage_above_base_capacity >= 0 &&
      var.spot.on_demand_percentage_above_base_capacity <= 100 &&
      contains(["price-capacity-optimized", "capacity-optimized", "capacity-optimized-prioritized", "lowest-price"], var.spot.spot_allocation_strategy)
    )
    error_message = "spot: on_demand_base_capacity >= 0, on_demand_percentage_above_base_capacity in 0..100, spot_allocation_strategy one of price-capacity-optimized, capacity-optimized, capacity-optimized-prioritized, lowest-price."
  }
}

variable "warm_pool" {
  description = "The group's EC2 Auto Scaling warm pool: pre-initialised instances a scale-out takes before it launches new ones. null: none. `state`: stopped (billed for EBS only), hibernated or running; `min_size`: kept at least; `max_prepared`: the group and its warm pool together at most (null: the group's max_size); `setup_timeout`: seconds an instance may take to finish its setup (the launch lifecycle hook's heartbeat) before the group goes on anyway. The boot script starts the runner, and reads its credential, only when the group puts the instance in service. A used instance never returns to the warm pool, unless `reuse` (persistent mode only): then an instance the group scales in goes back to the warm pool, and each time it returns it registers again with the fresh token the controller writes for it. AWS keeps no warm pool for a group with Spot instances (`spot`). The controller can manage it instead (`pools.<group>.warm_pool` in its config): use one or the other."
  type = object({
    state         = optional(string, "stopped")
    min_size      = optional(number, 0)
    max_prepared  = optional(number)
    setup_timeout = optional(number, 900)
    reuse         = optional(bool, false)
  })
  default = null

  validation {
    condition = var.warm_pool == null ? true : (
      contains(["stopped", "hibernated", "running"], var.warm_pool.state) &&
      var.warm_pool.min_size >= 0 && floor(var.warm_pool.min_size) == var.warm_pool.min_size &&
      var.warm_pool.setup_timeout >= 30 && var.warm_pool.setup_timeout <= 7200 &&
      (var.warm_pool.max_prepared == null ? true : (
        floor(var.warm_pool.max_prepared) == var.warm_pool.max_prepared &&
        var.warm_pool.max_prepared >= var.warm_pool.min_size
      ))
    )
    error_message = "warm_pool: state one of stopped, hibernated, running; min_size a whole number >= 0; max_prepared a whole number >= min_size (or null); setup_timeout 30 to 7200 seconds."
  }

  validation {
    condition     = var.warm_pool == null || var.spot == null
    error_message = "warm_pool needs an on-demand group: AWS keeps no warm pool for a group with Spot instances or a mixed instances policy (spot is set). Keep this pool cold and give its on-demand fallback the warm pool."
  }

  validation {
    condition     = var.warm_pool == null ? true : (!var.warm_pool.reuse || var.mode == "persistent")
    error_message = "warm_pool.reuse needs mode = \"persistent\": an ephemeral machine runs one job, and a used one never serves another."
  }
}

variable "create_instance_profile" {
  description = "Create an instance role and profile that may read (and delete) the instance's own credential parameter, and nothing else. false: pass instance_profile_name."
  type        = bool
  default     = true
}

variable "instance_profile_name" {
  description = "An existing instance profile (only when create_instance_profile is false). It must allow ssm:GetParameter and ssm:DeleteParameter on the instance's own parameter under jit_parameter_path, conditioned on the parameter's ci-autoscaler:instance-id tag equalling $${ec2:InstanceID}, and nothing more."
  type        = string
  default     = null

  validation {
    condition     = var.create_instance_profile || var.instance_profile_name != null
    error_message = "instance_profile_name is required when create_instance_profile is false."
  }
}

variable "kms_key_arn" {
  description = "KMS key that encrypts the credential parameters, if not the AWS-managed aws/ssm key."
  type        = string
  default     = null
}

variable "extra_user_data" {
  description = "Shell commands run as root before the runner registers (install toolchains, mount caches)."
  type        = string
  default     = ""
}

variable "health_check_grace_period" {
  description = "Seconds the group waits before checking a new instance's health."
  type        = number
  default     = 300

  validation {
    condition     = var.health_check_grace_period >= 0
    error_message = "health_check_grace_period must be >= 0."
  }
}

variable "suspended_processes" {
  description = "Auto Scaling processes to suspend. AZRebalance is suspended by default so the group never terminates runners on its own."
  type        = list(string)
  default     = ["AZRebalance"]

  validation {
    condition = alltrue([for p in var.suspended_processes : contains([
      "Launch", "Terminate", "HealthCheck", "ReplaceUnhealthy", "AZRebalance",
      "AlarmNotification", "ScheduledActions", "AddToLoadBalancer", "InstanceRefresh",
    ], p)])
    error_message = "suspended_processes must name Auto Scaling processes (Launch, Terminate, HealthCheck, ReplaceUnhealthy, AZRebalance, AlarmNotification, ScheduledActions, AddToLoadBalancer, InstanceRefresh)."
  }
}

variable "tags" {
  description = "Extra tags on every resource, propagated to instances and volumes."
  type        = map(string)
  default     = {}

  validation {
    condition     = !anytrue([for k in keys(var.tags) : startswith(k, "ci-autoscaler:")])
    error_message = "tags must not set ci-autoscaler:* keys; the module owns them."
  }
}
