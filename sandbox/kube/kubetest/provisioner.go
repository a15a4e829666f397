package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

const (
	storageClassName = "kubetest-hostpath"
	provisionerName  = "kubetest.cove.dev/hostpath"
	provisionedBy    = "pv.kubernetes.io/provisioned-by"
)

// provisioner is the StorageClass's dynamic provisioner, in the test
// process: for each pending claim of the class it makes a directory
// under dir (a copy of the source claim's, for a claim whose dataSource
// is another claim) and a hostPath volume bound to the claim; a
// released volume's directory and object are deleted.
type provisioner struct {
	cs   kubernetes.Interface
	dir  string
	logf func(string, ...any)

	pvcs corelisters.PersistentVolumeClaimLister
	pvs  corelisters.PersistentVolumeLister
}

// start makes the StorageClass and runs the provisioner until ctx ends.
func (p *provisioner) start(ctx context.Context) error {
	reclaim := corev1.PersistentVolumeReclaimDelete
	binding := storagev1.VolumeBindingImmediate
	_, err := p.cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        storageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       provisionerName,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &binding,
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("making the storage class: %w", err)
	}
	factory := informers.NewSharedInformerFactory(p.cs, time.Minute)
	pvcInf := factory.Core().V1().PersistentVolumeClaims()
	pvInf := factory.Core().V1().PersistentVolumes()
	p.pvcs, p.pvs = pvcInf.Lister(), pvInf.Lister()
	kick := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(kick) },
		UpdateFunc: func(any, any) { poke(kick) },
		DeleteFunc: func(any) { poke(kick) },
	}
	if _, err := pvcInf.Informer().AddEventHandler(notify); err != nil {
		return err
	}
	if _, err := pvInf.Informer().AddEventHandler(notify); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing the provisioner's %v cache", typ)
		}
	}
	go p.loop(ctx, kick)
	return nil
}

func poke(kick chan struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// loop reconciles on every change, and every few seconds for claims
// waiting for their source to be bound.
func (p *provisioner) loop(ctx context.Context, kick chan struct{}) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-tick.C:
		}
		p.reconcile(ctx)
	}
}

func (p *provisioner) reconcile(ctx context.Context) {
	claims, _ := p.pvcs.List(labels.Everything())
	for _, pvc := range claims {
		if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != storageClassName ||
			pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
			continue
		}
		if err := p.provision(ctx, pvc); err != nil && ctx.Err() == nil {
			p.logf("provisioner: claim %s/%s: %v", pvc.Namespace, pvc.Name, err)
		}
	}
	vols, _ := p.pvs.List(labels.Everything())
	for _, pv := range vols {
		if pv.Annotations[provisionedBy] != provisionerName || pv.Status.Phase != corev1.VolumeReleased ||
			pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.DeletionTimestamp != nil {
			continue
		}
		if err := p.remove(ctx, pv); err != nil && ctx.Err() == nil {
			p.logf("provisioner: volume %s: %v", pv.Name, err)
		}
	}
}

// provision makes the claim's directory and volume. A clone waits
// (returning nil) until its source claim is bound.
func (p *provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	name := "pvc-" + string(pvc.UID)
	if _, err := p.pvs.Get(name); err == nil {
		return nil // made; the controller manager binds it
	}
	dir := filepath.Join(p.dir, name)
	src, ready, err := p.source(pvc)
	if err != nil || !ready {
		return err
	}
	if err := os.RemoveAll(dir); err != nil { // a half-made copy
		return err
	}
	if src == "" {
		err = os.Mkdir(dir, 0o777)
	} else {
		// cp -a copies links as links and keeps owners and modes; the
		// copy is made beside the volumes and renamed, so a volume never
		// holds half a copy.
		tmp := dir + ".tmp"
		_ = os.RemoveAll(tmp)
		if out, cerr := exec.Command("cp", "-a", "--", src, tmp).CombinedOutput(); cerr != nil {
			return fmt.Errorf("copying the source volume: %v: %s", cerr, out)
		}
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		return err
	}
	if src == "" {
		if err := os.Chmod(dir, 0o777); err != nil { // pods may run as any user
			return err
		}
	}
	return p.create(ctx, pvc, name, dir)
}

// source returns the directory a claim starts as a copy of ("" for an
// empty volume), and whether it can be made now.
func (p *provisioner) source(pvc *corev1.PersistentVolumeClaim) (string, bool, error) {
	ds := pvc.Spec.DataSourceRef
	if ds == nil && pvc.Spec.DataSource != nil {
		ds = &corev1.TypedObjectReference{APIGroup: pvc.Spec.DataSource.APIGroup, Kind: pvc.Spec.DataSource.Kind, Name: pvc.Spec.DataSource.Name}
	}
	if ds == nil {
		return "", true, nil
	}
	if ds.Kind != "PersistentVolumeClaim" || (ds.APIGroup != nil && *ds.APIGroup != "") {
		return "", false, fmt.Errorf("data source %s %q is not supported: only a PersistentVolumeClaim", ds.Kind, ds.Name)
	}
	if ds.Namespace != nil && *ds.Namespace != "" && *ds.Namespace != pvc.Namespace {
		return "", false, fmt.Errorf("data source claim %s/%s is in another namespace", *ds.Namespace, ds.Name)
	}
	srcPVC, err := p.pvcs.PersistentVolumeClaims(pvc.Namespace).Get(ds.Name)
	if apierrors.IsNotFound(err) || (err == nil && srcPVC.Spec.VolumeName == "") {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	srcPV, err := p.pvs.Get(srcPVC.Spec.VolumeName)
	if err != nil {
		return "", false, nil
	}
	if srcPV.Annotations[provisionedBy] != provisionerName || srcPV.Spec.HostPath == nil {
		return "", false, fmt.Errorf("data source claim %q is not a volume of class %s", ds.Name, storageClassName)
	}
	return srcPV.Spec.HostPath.Path, true, nil
}

// create makes the volume, bound in advance to the claim.
func (p *provisioner) create(ctx context.Context, pvc *corev1.PersistentVolumeClaim, name, dir string) error {
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{provisionedBy: provisionerName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              storageClassName,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
		},
	}
	_, err := p.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// remove deletes a released volume's directory, then its object.
func (p *provisioner) remove(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.HostPath != nil && strings.HasPrefix(pv.Spec.HostPath.Path, p.dir+"/") {
		if err := os.RemoveAll(pv.Spec.HostPath.Path); err != nil {
			return err
		}
	}
	err := p.cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
