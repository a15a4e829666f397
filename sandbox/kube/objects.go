package kube

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
)

// Labels and annotations the runtime puts on what it makes. The Secret
// named objName(id) is a sandbox's record and the owner of the rest
// (its claim, pods and NetworkPolicy), so deleting it removes them all.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "cove"
	// LabelSandbox holds the sandbox id on every object of a sandbox.
	LabelSandbox = "cove.dev/sandbox"

	annState    = "cove.dev/state"      // running or stopped: what the sandbox should be
	annCreated  = "cove.dev/created"    // RFC 3339 with nanoseconds
	annDeadline = "cove.dev/deadline"   // RFC 3339, absent for none
	annGen      = "cove.dev/generation" // which start: its pod is podName(id, gen)

	keyToken = "token" // the daemon's access token
	keySpec  = "spec"  // the sandbox.Spec as JSON
	keyEnv   = "env"   // the spec's environment as JSON, for the daemon (guest.EnvEnv)

	// UID (and GID) every sandbox runs as: the template's user.
	UID = 1000
)

// record is a sandbox as its Secret holds it.
type record struct {
	ID        string
	Spec      sandbox.Spec
	Token     string
	CreatedAt time.Time
	State     sandbox.State
	Deadline  time.Time
	Gen       int

	uid             types.UID
	resourceVersion string
}

func objName(id string) string { return "cove-" + id }

func podName(id string, gen int) string { return fmt.Sprintf("cove-%s-%d", id, gen) }

// meta is the metadata of an object of rec's: its labels and, unless it
// is the Secret itself (rec.uid empty), the Secret as its owner.
func (r *Runtime) meta(rec *record, name string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: r.cfg.Namespace,
		Labels: map[string]string{LabelManagedBy: ManagedBy, LabelSandbox: rec.ID}}
	if rec.uid != "" {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: objName(rec.ID), UID: rec.uid}}
	}
	return m
}

// secret is rec as a Secret.
func (r *Runtime) secret(rec *record) (*corev1.Secret, error) {
	spec, err := json.Marshal(rec.Spec)
	if err != nil {
		return nil, err
	}
	env := rec.Spec.Env
	if env == nil {
		env = map[string]string{}
	}
	envJSON, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: r.meta(&record{ID: rec.ID}, objName(rec.ID)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{keyToken: []byte(rec.Token), keySpec: spec, keyEnv: envJSON},
	}
	s.ResourceVersion = rec.resourceVersion
	s.Annotations = rec.annotations()
	return s, nil
}

func (rec *record) annotations() map[string]string {
	a := map[string]string{
		annState:   string(rec.State),
		annCreated: rec.CreatedAt.UTC().Format(time.RFC3339Nano),
		annGen:     strconv.Itoa(rec.Gen),
	}
	if !rec.Deadline.IsZero() {
		a[annDeadline] = rec.Deadline.UTC().Format(time.RFC3339Nano)
	}
	return a
}

// parseRecord reads a sandbox's Secret.
func parseRecord(s *corev1.Secret) (*record, error) {
	id := s.Labels[LabelSandbox]
	rec := &record{ID: id, Token: string(s.Data[keyToken]), State: sandbox.State(s.Annotations[annState]),
		uid: s.UID, resourceVersion: s.ResourceVersion}
	if id == "" || s.Name != objName(id) {
		return nil, fmt.Errorf("secret %s is not a sandbox's record", s.Name)
	}
	if err := json.Unmarshal(s.Data[keySpec], &rec.Spec); err != nil {
		return nil, fmt.Errorf("sandbox %s: its record's spec: %w", id, err)
	}
	var err error
	if rec.CreatedAt, err = time.Parse(time.RFC3339Nano, s.Annotations[annCreated]); err != nil {
		return nil, fmt.Errorf("sandbox %s: its record's creation time: %w", id, err)
	}
	if v := s.Annotations[annDeadline]; v != "" {
		if rec.Deadline, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return nil, fmt.Errorf("sandbox %s: its record's deadline: %w", id, err)
		}
	}
	if rec.Gen, err = strconv.Atoi(s.Annotations[annGen]); err != nil {
		return nil, fmt.Errorf("sandbox %s: its record's generation: %w", id, err)
	}
	return rec, nil
}

// claim is the sandbox's workspace: a PersistentVolumeClaim of its disk
// size, a copy of the claim named from when it is a fork.
func (r *Runtime) claim(rec *record, from string) *corev1.PersistentVolumeClaim {
	size := rec.Spec.Limits.DiskBytes
	if size == 0 {
		size = r.cfg.DiskBytes
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: r.meta(rec, objName(rec.ID)),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		},
	}
	if r.cfg.StorageClass != "" {
		c.Spec.StorageClassName = &r.cfg.StorageClass
	}
	if from != "" {
		c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: from}
	}
	return c
}

// pod is the pod of rec's current start: the template's image, whose
// entrypoint is the daemon, serving on the guest port with the token and
// environment from the Secret, the claim at the workspace root, behind
// the walls (see the package doc).
func (r *Runtime) pod(rec *record, class string) *corev1.Pod {
	no, yes := false, true
	uid := int64(UID)
	grace := int64(2)
	onRootMismatch := corev1.FSGroupChangeOnRootMismatch
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	secretKey := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: objName(rec.ID)}, Key: key}}
	}
	p := &corev1.Pod{
		ObjectMeta: r.meta(rec, podName(rec.ID, rec.Gen)),
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Hostname:                      rec.ID,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
				FSGroupChangePolicy: &onRootMismatch, SeccompProfile: seccomp,
			},
			Containers: []corev1.Container{{
				Name:            "sandbox",
				Image:           r.image(rec.Spec.Template),
				ImagePullPolicy: r.cfg.PullPolicy,
				Args:            []string{"--workdir", rec.Spec.Root, "--listen", fmt.Sprintf("tcp://0.0.0.0:%d", r.cfg.GuestPort)},
				Env: []corev1.EnvVar{
					{Name: guest.TokenEnv, ValueFrom: secretKey(keyToken)},
					{Name: guest.EnvEnv, ValueFrom: secretKey(keyEnv)},
				},
				Ports:        []corev1.ContainerPort{{Name: "guest", ContainerPort: int32(r.cfg.GuestPort), Protocol: corev1.ProtocolTCP}},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: rec.Spec.Root}},
				Resources:    r.resources(rec.Spec.Limits),
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
					AllowPrivilegeEscalation: &no, Privileged: &no,
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: seccomp,
				},
			}},
			Volumes: []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: objName(rec.ID)}}}},
		},
	}
	if class != "" {
		p.Spec.RuntimeClassName = &class
	}
	return p
}

// resources are a sandbox's limits as a container's: the limits as
// asked, requests as the smaller of those and the runtime's defaults (a
// node fits many idle sandboxes).
func (r *Runtime) resources(l sandbox.Limits) corev1.ResourceRequirements {
	req := corev1.ResourceList{}
	lim := corev1.ResourceList{}
	cpuReq := r.cfg.RequestCPU
	if l.CPUs > 0 {
		lim[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPUs*1000+0.5), resource.DecimalSI)
		if c := lim[corev1.ResourceCPU]; c.Cmp(cpuReq) < 0 {
			cpuReq = c
		}
	}
	req[corev1.ResourceCPU] = cpuReq
	memReq := r.cfg.RequestMemory
	if l.MemoryBytes > 0 {
		lim[corev1.ResourceMemory] = *resource.NewQuantity(l.MemoryBytes, resource.BinarySI)
		if m := lim[corev1.ResourceMemory]; m.Cmp(memReq) < 0 {
			memReq = m
		}
	}
	req[corev1.ResourceMemory] = memReq
	if l.DiskBytes > 0 {
		// What the sandbox writes outside its workspace (the image's
		// writable layer) counts here.
		lim[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(l.DiskBytes, resource.BinarySI)
	}
	return corev1.ResourceRequirements{Requests: req, Limits: lim}
}
